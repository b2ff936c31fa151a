package import NIOCore

/// The header that starts every frame: a varint message number and a varint of type and flags.
package struct BLIPFrameHeader: Hashable, Sendable, CustomStringConvertible {
    /// The largest message number written: go-blip and the Cocoa peers keep numbers in 32 bits.
    package static let maximumMessageNumber = UInt64(UInt32.max)

    package var messageNumber: UInt64
    package var type: BLIPMessageType
    package var flags: BLIPFrameFlags

    package init(messageNumber: UInt64, type: BLIPMessageType, flags: BLIPFrameFlags = []) {
        self.messageNumber = messageNumber
        self.type = type
        self.flags = flags
    }

    package var description: String {
        "\(self.type)#\(self.messageNumber)\(self.flags.isEmpty ? "" : " \(self.flags)")"
    }

    /// The type-and-flags value as `dialect` writes it.
    package func wireFlags(in dialect: BLIPDialect) throws(BLIPWireError) -> UInt64 {
        guard self.type.rawValue & ~dialect.typeMask == 0 else {
            throw BLIPWireError(.flagNotInDialect("type \(self.type.rawValue)"))
        }
        var value = self.type.rawValue
        if self.flags.contains(.compressed) { value |= dialect.compressedBit }
        if self.flags.contains(.urgent) { value |= dialect.urgentBit }
        if self.flags.contains(.noReply) { value |= dialect.noReplyBit }
        if self.flags.contains(.moreComing) { value |= dialect.moreComingBit }
        if self.flags.contains(.meta) {
            guard let metaBit = dialect.metaBit else { throw BLIPWireError(.flagNotInDialect("meta")) }
            value |= metaBit
        }
        return UInt64(value)
    }

    /// Splits a type-and-flags value read from the wire. Bits a dialect does not define are ignored.
    package init(messageNumber: UInt64, wireFlags: UInt64, dialect: BLIPDialect) throws(BLIPWireError) {
        if dialect.rejectsFlagsAbove0xFF && wireFlags > 0xFF {
            throw BLIPWireError(.flagsOutOfRange(wireFlags))
        }
        // BLIP 3 peers truncate the value to 8 bits (LiteCore, go-blip).
        let bits = UInt8(truncatingIfNeeded: wireFlags)
        var flags: BLIPFrameFlags = []
        if bits & dialect.compressedBit != 0 { flags.insert(.compressed) }
        if bits & dialect.urgentBit != 0 { flags.insert(.urgent) }
        if bits & dialect.noReplyBit != 0 { flags.insert(.noReply) }
        if bits & dialect.moreComingBit != 0 { flags.insert(.moreComing) }
        if let metaBit = dialect.metaBit, bits & metaBit != 0 { flags.insert(.meta) }
        self.init(messageNumber: messageNumber, type: BLIPMessageType(rawValue: bits & dialect.typeMask), flags: flags)
    }

    /// Bytes this header takes on the wire; the more-coming flag never changes it.
    package func encodedLength(in dialect: BLIPDialect) throws(BLIPWireError) -> Int {
        BLIPVarint.encodedLength(of: self.messageNumber)
            + BLIPVarint.encodedLength(of: try self.wireFlags(in: dialect))
    }

    /// Appends the header to `buffer`; returns the bytes written. Refuses numbers above 2^32-1.
    @discardableResult
    package func write(to buffer: inout ByteBuffer, dialect: BLIPDialect) throws(BLIPWireError) -> Int {
        guard self.messageNumber <= Self.maximumMessageNumber else {
            throw BLIPWireError(.messageNumberTooLarge(self.messageNumber))
        }
        let flags = try self.wireFlags(in: dialect)
        let numberLength = BLIPVarint.encodedLength(of: self.messageNumber)
        let length = numberLength + BLIPVarint.encodedLength(of: flags)
        // Both varints in one write: each write of its own costs a capacity and an exclusivity check.
        buffer.writeWithUnsafeMutableBytes(minimumWritableBytes: length) { target in
            let written = BLIPVarint.encode(self.messageNumber, into: target)
            return written + BLIPVarint.encode(flags, into: UnsafeMutableRawBufferPointer(rebasing: target[written...]))
        }
        return length
    }

    /// Reads a header from the start of `bytes`; returns it and its length.
    package static func read(
        from bytes: UnsafeRawBufferPointer,
        dialect: BLIPDialect
    ) throws(BLIPWireError) -> (header: BLIPFrameHeader, length: Int) {
        let number = try BLIPVarint.decode(bytes, at: 0)
        let flags = try BLIPVarint.decode(bytes, at: number.length)
        let header: BLIPFrameHeader
        do throws(BLIPWireError) {
            header = try BLIPFrameHeader(messageNumber: number.value, wireFlags: flags.value, dialect: dialect)
        } catch {
            throw error.shifted(by: number.length)
        }
        return (header, number.length + flags.length)
    }
}
