import BLIPEngine
import BLIPWire
import NIOCore
import Testing

/// Digest 7.12: what go-blip and LiteCore do with frames a correct peer never sends.
@Suite("Inbound rules")
struct InboundRulesTests {
    func expectViolation(
        _ engine: BLIPConnectionEngine,
        _ frame: ByteBuffer,
        _ fragment: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let error = #expect(throws: BLIPEngineError.self, sourceLocation: sourceLocation) {
            _ = try engine.receive(frame, now: .now())
        }
        #expect(
            error?.code == .protocolViolation || error?.code == .tooManyMessagesInFlight,
            sourceLocation: sourceLocation
        )
        #expect(
            error?.message.contains(fragment) == true,
            "\(String(describing: error))",
            sourceLocation: sourceLocation
        )
        // After a fatal error the engine refuses everything until closed.
        #expect(throws: BLIPEngineError.self, sourceLocation: sourceLocation) {
            _ = try engine.receive(frame, now: .now())
        }
        #expect(throws: BLIPEngineError.self, sourceLocation: sourceLocation) { _ = try engine.enqueue(request()) }
    }

    @Test("a new request must be last + 1", arguments: BLIPDialect.allCases)
    func requestNumbering(dialect: BLIPDialect) throws {
        let forge = FrameForger(dialect: dialect)
        let engine = BLIPConnectionEngine(configuration: BLIPEngineConfiguration(dialect: dialect))
        expectViolation(engine, try forge.frame(.request, 2, properties: ["Profile": "x"]), "out of order")

        let second = BLIPConnectionEngine(configuration: BLIPEngineConfiguration(dialect: dialect))
        let secondForge = FrameForger(dialect: dialect)  // a fresh running CRC for a fresh connection
        let result = try second.receive(try secondForge.frame(.request, 1, properties: ["Profile": "x"]), now: .now())
        #expect(result.event?.started?.isComplete == true)
        expectViolation(second, try secondForge.frame(.request, 1, properties: ["Profile": "x"]), "finished request #1")
    }

    @Test(
        "a reply nobody awaits: fatal in BLIP 3 (LiteCore), ignored at or below the last request in the older dialects"
    )
    func unexpectedReplies() throws {
        for dialect in BLIPDialect.allCases {
            let engine = BLIPConnectionEngine(configuration: BLIPEngineConfiguration(dialect: dialect))
            var output = ByteBuffer()
            _ = try engine.enqueue(request(noReply: true))
            _ = try engine.nextFrame(into: &output, now: .now())
            let forge = FrameForger(dialect: dialect)
            let replyToNoReply = try forge.frame(.response, 1)
            if dialect == .blip3 {
                expectViolation(engine, replyToNoReply, "reply #1 to no request")
            } else {
                let result = try engine.receive(replyToNoReply, now: .now())
                #expect(result.event == nil, "ignored, as Cocoa does")
                expectViolation(engine, try forge.frame(.error, 2), "reply #2 to no request")
            }
        }
    }

    @Test("unknown frame types, unknown ACKs, ACKs above what was sent and malformed ACKs are ignored")
    func ignoredFrames() throws {
        let engine = BLIPConnectionEngine()
        let forge = FrameForger(dialect: .blip3)
        for frame in [
            ByteBuffer(hex: "01 03 00 00 00 00 00"),  // type 3
            ByteBuffer(hex: "01 07 00 00 00 00 00"),  // type 7
            try forge.ack(.ackRequest, 9, count: 50_000),  // nothing numbered 9
            ByteBuffer(hex: "01 35 D0 86"),  // truncated count
        ] {
            let result = try engine.receive(frame, now: .now())
            #expect(result.event == nil && !result.wakeWriter)
        }
        var output = ByteBuffer()
        let (id, _) = try engine.enqueue(request(body: bytes(300_000)))
        while case .frame = try engine.nextFrame(into: &output, now: .now()) { output.clear() }
        #expect(engine.status(of: id) == .waitingForACK)
        _ = try engine.receive(try forge.ack(.ackRequest, 1, count: 10_000_000), now: .now())
        #expect(engine.status(of: id) == .waitingForACK, "an ACK above the bytes sent is ignored")
    }

    @Test(
        "bad frames are fatal: CRC, deflate, property blocks, unfinished properties",
        arguments: [
            ("01 01 00 D2 02 EF 8C", "CRC-32"),
            ("01 08 FF FF FF FF 00 00 00 00", "deflate"),
            ("01 00 02 68 69 65 8F 35 2F", "NUL-terminated"),
        ] as [(String, String)]
    )
    func fatalFrames(hex: String, fragment: String) throws {
        // Request #1 with these bytes; the last case's CRC is valid, its property block is not.
        let engine = BLIPConnectionEngine()
        expectViolation(engine, ByteBuffer(hex: hex), fragment)
    }

    @Test("the last frame ending inside the property block is fatal")
    func endsInsideProperties() throws {
        let engine = BLIPConnectionEngine(configuration: BLIPEngineConfiguration(dialect: .blip2))
        expectViolation(engine, ByteBuffer(hex: "01 00 10 01 00 65 63"), "inside its property block")
    }

    @Test("a property block over the limit is fatal, before it is buffered")
    func propertiesTooLarge() throws {
        var configuration = BLIPEngineConfiguration()
        configuration.maximumPropertiesSize = 1000
        let engine = BLIPConnectionEngine(configuration: configuration)
        let forge = FrameForger(dialect: .blip3)
        var data = ByteBuffer()
        data.writeBLIPVarint(2000)
        data.writeRepeatingByte(0x61, count: 100)
        var output = ByteBuffer()
        _ = try forge.encoder.encodeFrame(
            BLIPFrameHeader(messageNumber: 1, type: .request),
            data: &data,
            endOfMessage: false,
            maximumFrameSize: 16_384,
            into: &output
        )
        expectViolation(engine, output, "exceeds 1000")
    }

    @Test("more messages in flight than allowed is fatal")
    func tooManyInFlight() throws {
        var configuration = BLIPEngineConfiguration(dialect: .blip2)
        configuration.maximumIncomingMessagesInFlight = 3
        let engine = BLIPConnectionEngine(configuration: configuration)
        let forge = FrameForger(dialect: .blip2)
        for number in 1...3 {
            _ = try engine.receive(
                try forge.frame(
                    .request,
                    UInt64(number),
                    flags: .moreComing,
                    properties: ["Profile": "p"],
                    endOfMessage: false
                ),
                now: .now()
            )
        }
        #expect(engine.incomingCount == 3)
        expectViolation(
            engine,
            try forge.frame(.request, 4, flags: .moreComing, properties: ["Profile": "p"], endOfMessage: false),
            "more than 3 messages"
        )
    }
}
