internal import BLIPWire
package import NIOCore

/// A message body the simulation can produce in pieces and check by length and CRC-32, so that a 4 MiB
/// body never has to be kept to compare against.
package struct SimulatedBody: Hashable, Sendable {
    package enum Kind: Hashable, Sendable, CaseIterable {
        /// xorshift64* bytes: incompressible.
        case random
        /// JSON lines: compressible.
        case text
        case zeros
    }

    package var kind: Kind
    package var length: Int
    package var seed: UInt64

    package init(kind: Kind, length: Int, seed: UInt64) {
        self.kind = kind
        self.length = length
        self.seed = seed
    }

    /// Bytes `range` of the body.
    package func bytes(_ range: Range<Int>) -> ByteBuffer {
        var buffer = ByteBuffer()
        guard !range.isEmpty else { return buffer }
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: range.count) { target in
            let output = target.bindMemory(to: UInt8.self)
            switch self.kind {
            case .zeros:
                output.initialize(repeating: 0)
            case .text:
                let line = Self.textLine
                line.withUnsafeBufferPointer { line in
                    var source = range.lowerBound % line.count
                    for index in 0..<range.count {
                        output[index] = line[source]
                        source = source == line.count - 1 ? 0 : source + 1
                    }
                }
            case .random:
                // Position-addressable: the 8 bytes at 8k..<8k+8 are the k-th output of a counter-based mix.
                var index = 0
                var position = range.lowerBound
                while index < range.count {
                    var z = self.seed &+ UInt64(position / 8) &* 0x9E37_79B9_7F4A_7C15
                    z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
                    z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
                    z ^= z >> 31
                    var shift = UInt64(8 * (position % 8))
                    while shift < 64 && index < range.count {
                        output[index] = UInt8(truncatingIfNeeded: z >> shift)
                        shift += 8
                        index += 1
                        position += 1
                    }
                }
            }
            return range.count
        }
        return buffer
    }

    private static let textLine = Array(
        "{\"_id\":\"doc-00000042\",\"type\":\"user\",\"name\":\"User 42\",\"tags\":[\"alpha\",\"beta\",\"gamma\"]}\n"
            .utf8
    )

    /// CRC-32 of the whole body.
    package var checksum: UInt32 {
        var checksum = BLIPRunningChecksum()
        var offset = 0
        while offset < self.length {
            let end = min(self.length, offset + 65_536)
            checksum.update(self.bytes(offset..<end))
            offset = end
        }
        return checksum.value
    }
}
