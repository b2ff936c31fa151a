internal import CBLIPZlib
package import NIOCore

/// The BLIP 3 running CRC-32 of one direction (IEEE, as zlib's `crc32`): it runs over the uncompressed
/// data of every non-ACK frame sent in that direction since the connection opened, and each frame ends
/// with its value after that frame's data.
package struct BLIPRunningChecksum: Hashable, Sendable {
    package private(set) var value: UInt32 = 0

    package init() {}

    /// Runs shorter than this go to ``SlicedCRC32``, longer ones to zlib (faster there).
    static let zlibThreshold = 256

    /// Extends the checksum over `bytes`.
    package mutating func update(_ bytes: UnsafeRawBufferPointer) {
        guard let base = bytes.baseAddress, !bytes.isEmpty else { return }
        if bytes.count < Self.zlibThreshold {
            self.value = SlicedCRC32.update(self.value, bytes)
        } else {
            self.value = UInt32(crc32_z(UInt(self.value), base.assumingMemoryBound(to: Bytef.self), bytes.count))
        }
    }

    /// Extends the checksum over the readable bytes of `buffer`.
    package mutating func update(_ buffer: ByteBuffer) {
        buffer.withUnsafeReadableBytes { self.update($0) }
    }

    /// The CRC-32 of `bytes` alone.
    package static func checksum(of bytes: some Sequence<UInt8>) -> UInt32 {
        var checksum = BLIPRunningChecksum()
        Array(bytes).withUnsafeBytes { checksum.update($0) }
        return checksum.value
    }
}
