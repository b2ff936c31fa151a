internal import ArgumentParser
internal import NIOCore

/// The data generators of performance.md, so that every implementation benchmarks the same bytes.
enum BenchmarkData: String, CaseIterable, Sendable {
    case random
    case text

    /// `abcdefghijklmnopqrstuvwxyz0123456789` repeated: the standard small body.
    static func pattern(_ count: Int) -> ByteBuffer {
        let alphabet = Array("abcdefghijklmnopqrstuvwxyz0123456789".utf8)
        var buffer = ByteBuffer()
        buffer.reserveCapacity(count)
        for index in 0..<count { buffer.writeInteger(alphabet[index % alphabet.count]) }
        return buffer
    }

    func bytes(_ count: Int) -> ByteBuffer {
        switch self {
        case .random: Self.random(count)
        case .text: Self.text(count)
        }
    }

    /// xorshift64*, seed 0x9E3779B97F4A7C15; each step emits 8 bytes little-endian.
    static func random(_ count: Int) -> ByteBuffer {
        var buffer = ByteBuffer()
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: count + 8) { target in
            var x: UInt64 = 0x9E37_79B9_7F4A_7C15
            var offset = 0
            while offset < count {
                x ^= x >> 12
                x ^= x << 25
                x ^= x >> 27
                target.storeBytes(
                    of: (x &* 2_685_821_657_736_338_717).littleEndian,
                    toByteOffset: offset,
                    as: UInt64.self
                )
                offset += 8
            }
            return count
        }
        return buffer
    }

    /// JSON lines, one user document per line, truncated to `count` bytes.
    static func text(_ count: Int) -> ByteBuffer {
        var buffer = ByteBuffer()
        buffer.reserveCapacity(count + 256)
        var index = 0
        while buffer.readableBytes < count {
            let id = String(index)
            let padded = String(repeating: "0", count: max(0, 8 - id.count)) + id
            buffer.writeString(
                "{\"_id\":\"doc-\(padded)\",\"type\":\"user\",\"name\":\"User \(index)\",\"email\":\"user\(index)@example.com\","
                    + "\"active\":\(index % 3 != 0),\"score\":\((index * 7919) % 100_000),\"tags\":[\"alpha\",\"beta\",\"gamma\"]}\n"
            )
            index += 1
        }
        buffer.moveWriterIndex(to: count)
        return buffer
    }
}

extension BenchmarkData: ExpressibleByArgument {}
