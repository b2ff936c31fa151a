import BLIPEngine
import BLIPWire
import NIOCore
import Testing

/// Messages past the size limit: gzip bodies stop inflating at the limit, an oversized message is drained
/// only so far, and a fatal error still lets complete replies out.
@Suite("Size limits and draining")
struct SizeLimitTests {
    /// The frames of one request whose body is `body`, gzipped (the older dialects) or deflated (BLIP 3).
    static func compressedRequest(
        dialect: BLIPDialect,
        body: ByteBuffer,
        frameSize: Int,
        number: UInt64 = 1
    ) throws -> [ByteBuffer] {
        let encoder = BLIPFrameEncoder(dialect: dialect)
        var data = ByteBuffer()
        let compressed = try encoder.writeMessageData(
            properties: ["Profile": "bomb"],
            body: body,
            compressed: true,
            into: &data
        )
        var message = BLIPMessageData(data)
        var frames: [ByteBuffer] = []
        while message.readableBytes > 0 {
            var frame = ByteBuffer()
            _ = try encoder.encodeFrame(
                BLIPFrameHeader(messageNumber: number, type: .request, flags: compressed ? [.compressed] : []),
                data: &message,
                endOfMessage: true,
                maximumFrameSize: frameSize,
                into: &frame
            )
            frames.append(frame)
        }
        return frames
    }

    static func receiver(_ dialect: BLIPDialect, limit: Int = 1 << 20) -> BLIPConnectionEngine {
        var configuration = BLIPEngineConfiguration(dialect: dialect)
        configuration.maximumIncomingMessageSize = limit
        configuration.maximumDrainedBytes = 64 << 20
        return BLIPConnectionEngine(configuration: configuration)
    }

    /// An 8 MiB gzip body (8 KiB on the wire) against a 1 MiB limit: inflation must stop at the limit,
    /// the request be answered ERR BLIP/413, and the connection go on.
    @Test(
        "a gzip bomb stops inflating at the message limit and is answered 413",
        arguments: [BLIPDialect.blip2, .seed],
        [1 << 20, 1024]
    )
    func gzipBomb(dialect: BLIPDialect, frameSize: Int) throws {
        let frames = try Self.compressedRequest(
            dialect: dialect,
            body: ByteBuffer(repeating: 0, count: 8 << 20),
            frameSize: frameSize
        )
        #expect(frameSize == 1 << 20 ? frames.count == 1 : frames.count > 1)
        #expect(frames.reduce(0) { $0 + $1.readableBytes } < 1 << 20)
        let engine = Self.receiver(dialect)
        var failed = false
        for frame in frames {
            switch try engine.receive(frame, now: .now()).event {
            case .messageStarted(let message) where message.isComplete:
                Issue.record("the oversized request was delivered whole")
            case .bodyReceived(_, _, true):
                Issue.record("the oversized request was delivered whole")
            case .messageFailed(_, _, let error):
                #expect(error.code == .messageTooLarge)
                failed = true
            default:
                break
            }
        }
        // Split into small frames, its start was delivered before it grew too large: then it failed.
        #expect(failed || frameSize == 1 << 20)
        #expect(engine.bytesInflated <= (1 << 20) + (64 << 10), "inflated \(engine.bytesInflated) bytes")
        // Its ERR BLIP/413 goes out; then a normal request is taken as usual.
        var output = ByteBuffer()
        var replies: [BLIPFrameHeader] = []
        while case .frame(let sent) = try engine.nextFrame(into: &output, now: .now()), replies.count < 100 {
            if !sent.header.type.isACK { replies.append(sent.header) }
        }
        #expect(replies.map(\.type) == [.error] && replies.first?.messageNumber == 1)
        let forger = FrameForger(dialect: dialect)
        let next = try engine.receive(try forger.frame(.request, 2, properties: ["Profile": "ok"]), now: .now())
        #expect(next.event?.started?.properties.profile == "ok")
    }

    @Test("a gzip piece that inflates past the per-frame limit is fatal", arguments: [BLIPDialect.blip2, .seed])
    func gzipBombInOneFrame(dialect: BLIPDialect) throws {
        let frames = try Self.compressedRequest(
            dialect: dialect,
            body: ByteBuffer(repeating: 0, count: 17 << 20),
            frameSize: 1 << 20
        )
        var configuration = BLIPEngineConfiguration(dialect: dialect)
        configuration.maximumIncomingMessageSize = 1 << 30
        configuration.decoder.maximumInflatedFrameSize = 16 << 20
        let engine = BLIPConnectionEngine(configuration: configuration)
        let error = #expect(throws: BLIPEngineError.self) {
            for frame in frames { _ = try engine.receive(frame, now: .now()) }
        }
        #expect(error?.code == .protocolViolation)
        #expect(engine.bytesInflated <= (16 << 20) + (1 << 20))
    }

    /// A message that goes on past the limit is drained only so far, then fails the connection.
    @Test("an oversized message is drained up to maximumDrainedBytes, then fatal", arguments: BLIPDialect.allCases)
    func drainCap(dialect: BLIPDialect) throws {
        var configuration = BLIPEngineConfiguration(dialect: dialect)
        configuration.maximumIncomingMessageSize = 1 << 20
        configuration.maximumDrainedBytes = 4 << 20
        let engine = BLIPConnectionEngine(configuration: configuration)
        let forger = FrameForger(dialect: dialect)
        var sent = 0
        let error = #expect(throws: BLIPEngineError.self) {
            for index in 0..<2_000 {
                let frame = try forger.frame(
                    .request,
                    1,
                    flags: [.moreComing],
                    properties: index == 0 ? ["Profile": "big"] : [:],
                    body: ByteBuffer(repeating: 0x61, count: 16_000),
                    endOfMessage: false
                )
                sent += 16_000
                _ = try engine.receive(frame, now: .now())
            }
        }
        #expect(error?.code == .messageTooLarge)
        #expect(sent > (5 << 20) && sent < (5 << 20) + 64_000, "failed after \(sent) bytes")
    }

    /// A compressed BLIP 3 message is still inflated while it is drained (the deflate stream is shared), so
    /// the drain allowance counts what it inflates to: a bomb cannot keep the connection busy for ever.
    @Test("the drain allowance counts inflated bytes of compressed BLIP 3 frames; the 413 goes out first")
    func compressedDrainCap() throws {
        var configuration = BLIPEngineConfiguration(dialect: .blip3)
        configuration.maximumIncomingMessageSize = 1 << 20
        configuration.maximumDrainedBytes = 4 << 20
        let engine = BLIPConnectionEngine(configuration: configuration)
        var senderConfiguration = BLIPEngineConfiguration(dialect: .blip3)
        senderConfiguration.sendWindow = .fixed(1 << 30)
        let sender = BLIPConnectionEngine(configuration: senderConfiguration)
        _ = try sender.enqueue(
            BLIPOutgoingMessage(
                .request,
                properties: ["Profile": "bomb"],
                body: .buffer(ByteBuffer(repeating: 0, count: 32 << 20)),
                compressed: true
            )
        )
        var wire = 0
        var error: BLIPEngineError?
        var frame = ByteBuffer()
        while error == nil, case .frame = try sender.nextFrame(into: &frame, now: .now()) {
            wire += frame.readableBytes
            do {
                _ = try engine.receive(frame, now: .now())
            } catch let thrown {
                error = thrown
            }
            frame = ByteBuffer()
        }
        #expect(error?.code == .messageTooLarge)
        #expect(wire < 64 << 10, "\(wire) bytes on the wire")
        #expect(engine.bytesInflated <= (5 << 20) + (512 << 10), "inflated \(engine.bytesInflated)")
        engine.finishRepliesAfterFailure()
        var output = ByteBuffer()
        guard case .frame(let sent) = try engine.nextFrame(into: &output, now: .now()) else {
            Issue.record("no 413 before the close")
            return
        }
        #expect(sent.header.type == .error)
    }

    /// After which of a 20-frame, 320 000-byte request (limit 100 000) an ERR left, frame by frame.
    private func refusals(early: Bool) throws -> [Int] {
        var configuration = BLIPEngineConfiguration(dialect: .blip3)
        configuration.maximumIncomingMessageSize = 100_000
        configuration.repliesEarlyToOversizedRequests = early
        let engine = BLIPConnectionEngine(configuration: configuration)
        let forger = FrameForger(dialect: .blip3)
        var refusedAfter: [Int] = []
        for index in 0..<20 {
            let frame = try forger.frame(
                .request,
                1,
                flags: index < 19 ? [.moreComing] : [],
                properties: index == 0 ? ["Profile": "big"] : [:],
                body: ByteBuffer(repeating: 0x61, count: 16_000),
                endOfMessage: index == 19
            )
            _ = try engine.receive(frame, now: .now())
            var output = ByteBuffer()
            while case .frame(let sent) = try engine.nextFrame(into: &output, now: .now()) {
                if sent.header.type == .error { refusedAfter.append(index) }
            }
        }
        return refusedAfter
    }

    @Test("with repliesEarlyToOversizedRequests the 413 leaves before the request ends")
    func earlyRefusal() throws {
        // Once, after the 7th frame, which takes the body past 100 000 bytes.
        #expect(try self.refusals(early: true) == [6])
    }

    @Test("without it, the 413 waits for the request's last frame (LiteCore's rule)")
    func refusalAtTheEnd() throws {
        #expect(try self.refusals(early: false).last == 19)
    }

    @Test("after a fatal frame, replies already queued whole are still framed; nothing else is")
    func finishRepliesAfterFailure() throws {
        let engine = BLIPConnectionEngine(configuration: BLIPEngineConfiguration(dialect: .blip3))
        let forger = FrameForger(dialect: .blip3)
        _ = try engine.receive(try forger.frame(.request, 1, properties: ["Profile": "a"]), now: .now())
        _ = try engine.receive(try forger.frame(.request, 2, properties: ["Profile": "b"]), now: .now())
        _ = try engine.enqueue(
            BLIPOutgoingMessage(.response(toRequest: 1), properties: [:], body: .buffer(bytes(300_000)))
        )
        _ = try engine.enqueue(request("mine"))
        #expect(throws: BLIPEngineError.self) { _ = try engine.receive(ByteBuffer(bytes: [0xFF]), now: .now()) }
        var output = ByteBuffer()
        #expect(try engine.nextFrame(into: &output, now: .now()) == .idle)  // failed: nothing leaves
        engine.finishRepliesAfterFailure()
        var replyBytes = 0
        var frames = 0
        while case .frame(let sent) = try engine.nextFrame(into: &output, now: .now()), frames < 1_000 {
            #expect(sent.header.type == .response && sent.header.messageNumber == 1)
            replyBytes += sent.length
            frames += 1
        }
        #expect(replyBytes > 300_000)  // past the 128 000-byte window: no ACK is awaited
        _ = engine.close()
    }
}
