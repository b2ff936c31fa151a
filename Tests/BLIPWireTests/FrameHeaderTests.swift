import BLIPWire
import NIOCore
import Testing

@Suite("Frame headers")
struct FrameHeaderTests {
    /// Every flag alone, per dialect, with its wire value (digest 5.1, 6.1, 7.2).
    @Test(
        "flag bits per dialect",
        arguments: [
            (BLIPDialect.blip3, BLIPFrameFlags.compressed, UInt64(0x08)),
            (.blip3, .urgent, 0x10), (.blip3, .noReply, 0x20), (.blip3, .moreComing, 0x40),
            (.blip2, .compressed, 0x08), (.blip2, .urgent, 0x10), (.blip2, .noReply, 0x20),
            (.blip2, .moreComing, 0x40), (.blip2, .meta, 0x80),
            (.seed, .compressed, 0x04), (.seed, .urgent, 0x08), (.seed, .noReply, 0x10),
            (.seed, .moreComing, 0x20), (.seed, .meta, 0x40),
        ] as [(BLIPDialect, BLIPFrameFlags, UInt64)]
    )
    func flagBits(dialect: BLIPDialect, flag: BLIPFrameFlags, wire: UInt64) throws {
        let header = BLIPFrameHeader(messageNumber: 1, type: .response, flags: flag)
        #expect(try header.wireFlags(in: dialect) == wire | 1)
        let decoded = try BLIPFrameHeader(messageNumber: 1, wireFlags: wire | 1, dialect: dialect)
        #expect(decoded == header)
    }

    @Test("ACK frames carry 0x34 and 0x35", arguments: [BLIPDialect.blip3, .blip2])
    func ackFlags(dialect: BLIPDialect) throws {
        let ackRequest = BLIPFrameHeader(messageNumber: 1, type: .ackRequest, flags: [.urgent, .noReply])
        let ackResponse = BLIPFrameHeader(messageNumber: 1, type: .ackResponse, flags: [.urgent, .noReply])
        #expect(try ackRequest.wireFlags(in: dialect) == 0x34)
        #expect(try ackResponse.wireFlags(in: dialect) == 0x35)
    }

    @Test("the seed dialect cannot express ACK types; BLIP 3 has no meta flag")
    func inexpressible() {
        #expect(throws: BLIPWireError.self) {
            try BLIPFrameHeader(messageNumber: 1, type: .ackRequest).wireFlags(in: .seed)
        }
        #expect(throws: BLIPWireError(.flagNotInDialect("meta"))) {
            try BLIPFrameHeader(messageNumber: 1, type: .request, flags: .meta).wireFlags(in: .blip3)
        }
    }

    @Test("the meta flag makes the BLIP 2 flags varint two bytes (digest 10.6)")
    func metaVarint() throws {
        var buffer = ByteBuffer()
        try BLIPFrameHeader(messageNumber: 1, type: .request, flags: .meta).write(to: &buffer, dialect: .blip2)
        #expect(buffer.hexString == "01 80 01")
        buffer.clear()
        try BLIPFrameHeader(messageNumber: 1, type: .request, flags: [.meta, .moreComing, .noReply])
            .write(to: &buffer, dialect: .blip2)
        #expect(buffer.hexString == "01 E0 01")
    }

    @Test("request #300 with more-coming and urgent is AC 02 50 (digest 10.5)")
    func header300() throws {
        var buffer = ByteBuffer()
        let header = BLIPFrameHeader(messageNumber: 300, type: .request, flags: [.moreComing, .urgent])
        #expect(try header.write(to: &buffer, dialect: .blip3) == 3)
        #expect(buffer.hexString == "AC 02 50")
        #expect(try header.encodedLength(in: .blip3) == 3)
    }

    @Test("numbers above 2^32-1 are refused on output, accepted on input")
    func numberLimit() throws {
        var buffer = ByteBuffer()
        let largest = BLIPFrameHeader(messageNumber: UInt64(UInt32.max), type: .request)
        try largest.write(to: &buffer, dialect: .blip3)
        #expect(buffer.hexString == "FF FF FF FF 0F 00")
        let tooLarge = BLIPFrameHeader(messageNumber: UInt64(UInt32.max) + 1, type: .request)
        #expect(throws: BLIPWireError(.messageNumberTooLarge(UInt64(UInt32.max) + 1))) {
            try tooLarge.write(to: &buffer, dialect: .blip3)
        }
        var wide = ByteBuffer()
        wide.writeBLIPVarint(UInt64(1) << 40)
        wide.writeBLIPVarint(0)
        let (decoded, length) = try wide.withUnsafeReadableBytes { bytes in
            try BLIPFrameHeader.read(from: bytes, dialect: .blip3)
        }
        #expect(decoded.messageNumber == UInt64(1) << 40)
        #expect(length == wide.readableBytes)
    }

    @Test("unknown types decode as themselves and are not defined in the dialect")
    func unknownTypes() throws {
        for (dialect, raw) in [(BLIPDialect.blip3, UInt64(3)), (.blip3, 6), (.blip3, 7), (.blip2, 3), (.seed, 3)] {
            let header = try BLIPFrameHeader(messageNumber: 1, wireFlags: raw, dialect: dialect)
            #expect(header.type.rawValue == UInt8(raw))
            #expect(!header.type.isDefined(in: dialect))
        }
        // With the seed dialect's 0x03 mask, 4 and 5 are a compressed MSG and RPY, never ACKs (trap 2).
        let seedFour = try BLIPFrameHeader(messageNumber: 1, wireFlags: 4, dialect: .seed)
        #expect(seedFour.type == .request && seedFour.flags == .compressed)
        #expect(!BLIPMessageType.ackRequest.isDefined(in: .seed))
    }

    @Test("flags varint above 0xFF: truncated in BLIP 3, refused by the older dialects")
    func flagsAbove0xFF() throws {
        let truncated = try BLIPFrameHeader(messageNumber: 1, wireFlags: 0x141, dialect: .blip3)
        #expect(truncated.type == .response && truncated.flags == .moreComing)
        for dialect in [BLIPDialect.blip2, .seed] {
            #expect(throws: BLIPWireError(.flagsOutOfRange(0x141))) {
                try BLIPFrameHeader(messageNumber: 1, wireFlags: 0x141, dialect: dialect)
            }
        }
    }
}
