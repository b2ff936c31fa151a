public import NIOCore

/// Unsigned LEB128, the varint of every BLIP dialect since 2013: seven payload bits per byte, least
/// significant group first, the high bit set on every byte but the last.
///
/// Output is always minimal. Input may be non-minimal (`80 00` is 0), as every real decoder allows;
/// it may not end mid-varint, and may not exceed 64 bits (more than 10 bytes, or a 10th byte above 1),
/// as in fleece's and Go's decoders.
@usableFromInline package enum BLIPVarint {
    /// The longest encoding of a 64-bit value.
    @usableFromInline package static let maximumLength = 10

    /// How many bytes the minimal encoding of `value` takes.
    @inlinable
    package static func encodedLength(of value: UInt64) -> Int {
        // 1 + floor(log2(value) / 7), with 0 taking one byte.
        let significantBits = 64 - (value | 1).leadingZeroBitCount
        return (significantBits + 6) / 7
    }

    /// Writes the minimal encoding of `value` at the start of `target`, which has room for it; returns the
    /// number of bytes written.
    @inlinable
    package static func encode(_ value: UInt64, into target: UnsafeMutableRawBufferPointer) -> Int {
        let length = self.encodedLength(of: value)
        var remaining = value
        for index in 0..<(length - 1) {
            target[index] = UInt8(truncatingIfNeeded: remaining) | 0x80
            remaining >>= 7
        }
        target[length - 1] = UInt8(truncatingIfNeeded: remaining)
        return length
    }

    /// Decodes one varint at `offset` of `bytes`; returns the value and the number of bytes read.
    @inlinable
    package static func decode(
        _ bytes: UnsafeRawBufferPointer,
        at offset: Int = 0
    ) throws(BLIPWireError) -> (value: UInt64, length: Int) {
        var value: UInt64 = 0
        var index = offset
        var shift: UInt64 = 0
        while true {
            guard index < bytes.count else {
                throw BLIPWireError(.truncatedVarint, offset: offset)
            }
            let byte = bytes[index]
            index += 1
            if index - offset == maximumLength && byte > 1 {
                throw BLIPWireError(.varintOverflow, offset: offset)
            }
            value |= UInt64(byte & 0x7F) << shift
            if byte < 0x80 {
                return (value, index - offset)
            }
            shift += 7
        }
    }
}

extension ByteBuffer {
    /// Reads a BLIP varint and moves the reader index past it; on error the reader index is unchanged
    /// and the error's offset is relative to it.
    @inlinable
    package mutating func readBLIPVarint() throws(BLIPWireError) -> UInt64 {
        let result = try self.peekBLIPVarint()
        self.moveReaderIndex(forwardBy: result.length)
        return result.value
    }

    /// Decodes the BLIP varint at the reader index without consuming it.
    @inlinable
    package func peekBLIPVarint() throws(BLIPWireError) -> (value: UInt64, length: Int) {
        // A varint is at most 10 bytes, so only look at those: the rest of a big frame is irrelevant.
        let window = Swift.min(self.readableBytes, BLIPVarint.maximumLength)
        return try self.withUnsafeReadableBytes { bytes throws(BLIPWireError) in
            try BLIPVarint.decode(UnsafeRawBufferPointer(rebasing: bytes.prefix(window)))
        }
    }

    /// Writes `value` as a minimal BLIP varint; returns the number of bytes written.
    @inlinable
    @discardableResult
    package mutating func writeBLIPVarint(_ value: UInt64) -> Int {
        let length = BLIPVarint.encodedLength(of: value)
        self.writeWithUnsafeMutableBytes(minimumWritableBytes: length) { target in
            BLIPVarint.encode(value, into: target)
        }
        return length
    }
}
