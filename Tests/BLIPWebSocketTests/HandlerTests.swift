import BLIP
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOEmbedded
import NIOWebSocket
import Synchronization
import Testing

@testable import BLIPWebSocket

/// The WebSocket handler on an EmbeddedChannel: what happens at once, with no clock involved.
@Suite("WebSocket handler")
struct HandlerTests {
    static func settings(_ role: BLIPWebSocketHandler.Role) -> BLIPWebSocketHandler.Settings {
        BLIPWebSocketHandler.Settings(
            role: role,
            heartbeatInterval: nil,
            heartbeatTimeout: .seconds(30),
            closeTimeout: .seconds(2),
            frameSize: 16_384,
            maximumMessageSize: 1 << 20,
            logger: Logger(label: "test")
        )
    }

    /// A connected channel: a server's frame decoder, then our handler.
    static func channel(_ handler: BLIPWebSocketHandler) throws -> EmbeddedChannel {
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(
            ByteToMessageHandler(UnmaskingFrameDecoder(maximumFrameSize: 1 << 20))
        )
        try channel.pipeline.syncOperations.addHandler(handler)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 9)).wait()
        return channel
    }

    @Test("a frame the decoder refuses (a 126-byte ping) gets close 1002, then the connection ends at once")
    func decoderErrorClosesAtOnce() throws {
        let handler = BLIPWebSocketHandler(settings: Self.settings(.server))
        let channel = try Self.channel(handler)
        handler.start(RawEndpoint(mode: .echo))
        // FIN + ping, masked, 16-bit length 126: nothing after this header can be parsed.
        try channel.writeInbound(ByteBuffer(bytes: [0x89, 0xFE, 0x00, 0x7E, 1, 2, 3, 4]))
        var close = try #require(try channel.readOutbound(as: ByteBuffer.self))
        // FIN + close, unmasked, then the code.
        #expect(close.readInteger(as: UInt8.self) == 0x88)
        #expect(close.readInteger(as: UInt8.self) == UInt8(close.readableBytes))
        #expect(close.readWebSocketErrorCode() == .protocolError)
        // No wait for a close frame from the peer: the decoder could not read it.
        #expect(!channel.isActive)
        channel.embeddedEventLoop.run()
    }

    @Test("a server writes each frame as one unmasked buffer, its header in the room before the payload")
    func serverWritesWholeFrames() throws {
        let handler = BLIPWebSocketHandler(settings: Self.settings(.server))
        let channel = try Self.channel(handler)
        handler.start(RawEndpoint(mode: .echo))
        // FIN + binary, masked with key 0, length 3.
        try channel.writeInbound(ByteBuffer(bytes: [0x82, 0x83, 0, 0, 0, 0, 7, 8, 9]))
        channel.embeddedEventLoop.run()
        let echo = try #require(try channel.readOutbound(as: ByteBuffer.self))
        #expect(Array(echo.readableBytesView) == [0x82, 0x03, 7, 8, 9])
        #expect(try channel.readOutbound(as: ByteBuffer.self) == nil)  // one write per frame: no separate header
        _ = try? channel.finish(acceptAlreadyClosed: true)
    }

    @Test("an idle connection keeps no frame-sized buffer; one that is writing keeps one for its next frame")
    func idleConnectionsHoldNoSpareBuffer() throws {
        let idle = BLIPWebSocketHandler(settings: Self.settings(.server))
        let idleChannel = try Self.channel(idle)
        idle.start(RecordingSink())  // the start's pump finds nothing to send
        idleChannel.embeddedEventLoop.run()
        // A 16 KiB buffer per idle connection was most of what one cost a server beyond its socket.
        #expect(!idle.holdsSpareBuffer)
        _ = try? idleChannel.finish(acceptAlreadyClosed: true)

        let writing = BLIPWebSocketHandler(settings: Self.settings(.server))
        let writingChannel = try Self.channel(writing)
        writing.start(EchoSink(writesWithinReadBatch: true))
        try writingChannel.writeInbound(ByteBuffer(bytes: [0x82, 0x83, 0, 0, 0, 0, 7, 8, 9]))
        writingChannel.embeddedEventLoop.run()
        #expect(try writingChannel.readOutbound(as: ByteBuffer.self) != nil)
        #expect(writing.holdsSpareBuffer)
        _ = try? writingChannel.finish(acceptAlreadyClosed: true)
    }

    /// The frames a server or client wrote, unmasked: (opcode, payload) in order.
    static func frames(in written: [UInt8]) -> [(opcode: UInt8, payload: [UInt8])] {
        var frames: [(UInt8, [UInt8])] = []
        var index = 0
        while index + 2 <= written.count {
            let opcode = written[index] & 0x0F
            let masked = written[index + 1] & 0x80 != 0
            var length = Int(written[index + 1] & 0x7F)
            index += 2
            if length == 126 {
                length = Int(written[index]) << 8 | Int(written[index + 1])
                index += 2
            }
            let key = masked ? Array(written[index..<index + 4]) : [0, 0, 0, 0]
            if masked { index += 4 }
            let payload = written[index..<index + length].enumerated().map { $0.element ^ key[$0.offset & 3] }
            frames.append((opcode, payload))
            index += length
        }
        return frames
    }

    @Test(
        "small frames sent one after another leave in one write, a large one alone, all in order",
        arguments: [BLIPWebSocketHandler.Role.server, .client]
    )
    func smallFramesShareAWrite(role: BLIPWebSocketHandler.Role) throws {
        let handler = BLIPWebSocketHandler(settings: Self.settings(role))
        let channel = try Self.channel(handler)
        handler.start(RawEndpoint(mode: .echo))
        let payloads: [[UInt8]] = [[1, 2, 3], [4, 5], Array(repeating: 6, count: 5_000), [7], [8, 9]]
        // One read carrying five binary frames, masked (key 0) towards a server, unmasked towards a client.
        var inbound: [UInt8] = []
        for payload in payloads {
            inbound.append(0x82)
            let maskBit: UInt8 = role == .server ? 0x80 : 0
            if payload.count < 126 {
                inbound.append(maskBit | UInt8(payload.count))
            } else {
                inbound += [maskBit | 126, UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)]
            }
            if role == .server { inbound += [0, 0, 0, 0] }
            inbound += payload
        }
        try channel.writeInbound(ByteBuffer(bytes: inbound))
        channel.embeddedEventLoop.run()
        let writes = try Self.writes(on: channel)
        // The two small frames, the large one, the last two small ones.
        #expect(writes.map { Self.frames(in: $0).count } == [2, 1, 2])
        let echoed = Self.frames(in: writes.flatMap { $0 })
        #expect(echoed.map(\.opcode) == Array(repeating: 2, count: payloads.count))
        #expect(echoed.map(\.payload) == payloads)
        if role == .client {
            // Each frame masked with a key of its own, inside the shared write too.
            #expect(writes[0][1] & 0x80 != 0 && writes[0][2 + 4 + 3 + 1] & 0x80 != 0)
        }
        _ = try? channel.finish(acceptAlreadyClosed: true)
    }

    /// What the handler has written and flushed since the last call, write by write.
    static func writes(on channel: EmbeddedChannel) throws -> [[UInt8]] {
        var writes: [[UInt8]] = []
        while let piece = try channel.readOutbound(as: ByteBuffer.self) {
            writes.append(Array(piece.readableBytesView))
        }
        return writes
    }

    /// The same on a testing channel (which runs no queued task meanwhile).
    static func writes(on channel: NIOAsyncTestingChannel) async throws -> [[UInt8]] {
        var writes: [[UInt8]] = []
        while let piece = try await channel.readOutbound(as: ByteBuffer.self) {
            writes.append(Array(piece.readableBytesView))
        }
        return writes
    }

    /// Binary frames masked with key 0 (towards a server), one per payload, as one read would carry them.
    static func maskedFrames(_ payloads: [[UInt8]]) -> [UInt8] {
        payloads.flatMap { payload in
            precondition(payload.count < 126)
            return [0x82, 0x80 | UInt8(payload.count), 0, 0, 0, 0] + payload
        }
    }

    @Test(
        "a long read batch's replies leave early: after its first four small messages, then every sixteen",
        arguments: [true, false]
    )
    func longReadBatchWritesEarly(writesEarly: Bool) throws {
        let handler = BLIPWebSocketHandler(settings: Self.settings(.server))
        let channel = try Self.channel(handler)
        let sink = EchoSink(writesWithinReadBatch: writesEarly)
        handler.start(sink)
        let payloads = (0..<22).map { [UInt8($0)] }
        // Frames read but the read batch not yet over: NIO has not called channelReadComplete.
        channel.pipeline.fireChannelRead(ByteBuffer(bytes: Self.maskedFrames(payloads)))
        let early = try Self.writes(on: channel)
        channel.pipeline.fireChannelReadComplete()
        channel.embeddedEventLoop.run()
        let late = try Self.writes(on: channel)
        // Without (the raw endpoint, the benchmarks' baseline): one write, when the batch ends.
        #expect(early.map { Self.frames(in: $0).count } == (writesEarly ? [4, 16] : []))
        #expect(late.map { Self.frames(in: $0).count } == (writesEarly ? [2] : [22]))
        #expect(Self.frames(in: (early + late).flatMap { $0 }).map(\.payload) == payloads)
        // The next batch counts afresh.
        channel.pipeline.fireChannelRead(ByteBuffer(bytes: Self.maskedFrames(Array(payloads.prefix(5)))))
        #expect(try Self.writes(on: channel).map { Self.frames(in: $0).count } == (writesEarly ? [4] : []))
        // Large messages do not count (twenty frames of 5 000 bytes: nothing before the batch ends).
        let header: [UInt8] = [0x82, 0x80 | 126, 0x13, 0x88, 0, 0, 0, 0]  // binary, masked, 16-bit length 5 000
        let large = (0..<20).flatMap { _ in header + Array(repeating: UInt8(7), count: 5_000) }
        channel.pipeline.fireChannelReadComplete()
        channel.embeddedEventLoop.run()
        _ = try Self.writes(on: channel)
        channel.pipeline.fireChannelRead(ByteBuffer(bytes: large))
        #expect(try Self.writes(on: channel).isEmpty)
        _ = try? channel.finish(acceptAlreadyClosed: true)
    }

    @Test("a close decided during an early write goes out after that write's frames, and nothing follows it")
    func closeDuringEarlyWrite() throws {
        let handler = BLIPWebSocketHandler(settings: Self.settings(.server))
        let channel = try Self.channel(handler)
        let sink = EchoSink(writesWithinReadBatch: true)
        sink.closeAfter = 6
        sink.handler = handler
        handler.start(sink)
        channel.pipeline.fireChannelRead(ByteBuffer(bytes: Self.maskedFrames((0..<22).map { [UInt8($0)] })))
        channel.pipeline.fireChannelReadComplete()
        channel.embeddedEventLoop.run()
        let frames = Self.frames(in: try Self.writes(on: channel).flatMap { $0 })
        // The second early write (after twenty messages) echoes 5-20 and then closes; 21 and 22 are dropped.
        #expect(frames.map(\.opcode) == Array(repeating: 2, count: 20) + [8])
        #expect(frames.prefix(20).map(\.payload) == (0..<20).map { [UInt8($0)] })
        sink.handler = nil
        _ = try? channel.finish(acceptAlreadyClosed: true)
    }

    @Test("messages held from before the start do not count towards a read batch's early write")
    func earlyMessagesDoNotCount() throws {
        let handler = BLIPWebSocketHandler(settings: Self.settings(.server))
        let channel = try Self.channel(handler)
        channel.pipeline.fireChannelRead(ByteBuffer(bytes: Self.maskedFrames((0..<6).map { [UInt8($0)] })))
        let sink = EchoSink(writesWithinReadBatch: true)
        handler.start(sink)
        // The start's own pump answers the six held messages in one write.
        #expect(try Self.writes(on: channel).map { Self.frames(in: $0).count } == [6])
        // The next batch counts from zero: its first early write comes after four messages, not fewer.
        channel.pipeline.fireChannelRead(ByteBuffer(bytes: Self.maskedFrames((0..<3).map { [UInt8($0)] })))
        #expect(try Self.writes(on: channel).isEmpty)
        channel.pipeline.fireChannelRead(ByteBuffer(bytes: Self.maskedFrames([[3]])))
        #expect(try Self.writes(on: channel).map { Self.frames(in: $0).count } == [4])
        _ = try? channel.finish(acceptAlreadyClosed: true)
    }

    @Test("a BLIP server answering at once writes its replies to a long read batch before the batch ends")
    func blipConnectionWritesEarly() async throws {
        // A loop that can serve as the connection's executor, unlike EmbeddedChannel's. The handler is used
        // on that loop only (inside executeInContext, and by the transport).
        nonisolated(unsafe) let handler = BLIPWebSocketHandler(settings: Self.settings(.server))
        let channel = NIOAsyncTestingChannel()
        try await channel.testingEventLoop.executeInContext {
            try channel.pipeline.syncOperations.addHandler(
                ByteToMessageHandler(UnmaskingFrameDecoder(maximumFrameSize: 1 << 20))
            )
            try channel.pipeline.syncOperations.addHandler(handler)
        }
        try await channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 9))
        var router = BLIPRouter()
        router.registerSynchronous(profile: "echo") { request, _ in BLIPResponse(body: request.body) }
        let connection = try await channel.testingEventLoop.executeInContext { [router] in
            let transport = BLIPWebSocketTransport(
                dialect: .blip3,
                subprotocol: "BLIP_3+CBMobile_3",
                handler: handler,
                channel: channel
            )
            return BLIPConnection(transport: transport, router: router)
        }
        await channel.testingEventLoop.run()
        let frames = HandMadeFrames()
        let requests = try (1...22).map {
            try Array(
                frames.request(UInt64($0), profile: "echo", body: ByteBuffer(string: "x"), moreComing: false)
                    .readableBytesView
            )
        }
        // Frames read but the read batch not yet over: NIO has not called channelReadComplete.
        try await channel.testingEventLoop.executeInContext {
            channel.pipeline.fireChannelRead(ByteBuffer(bytes: Self.maskedFrames(requests)))
        }
        let early = try await Self.writes(on: channel)
        try await channel.testingEventLoop.executeInContext { channel.pipeline.fireChannelReadComplete() }
        await channel.testingEventLoop.run()
        let late = try await Self.writes(on: channel)
        #expect(early.map { Self.frames(in: $0).count } == [4, 16])
        #expect(late.map { Self.frames(in: $0).count } == [2])
        #expect(connection.statistics.framesReceived == 22)
        _ = try? await channel.finish(acceptAlreadyClosed: true)
        await channel.testingEventLoop.run()
    }

    /// Regression: the engine can fail while the pump frames (the connection then closes from inside
    /// `nextMessage`); the close frame was written at once, before the frames the pump had gathered for one
    /// write, which then went out after it.
    @Test(
        "a close decided while the pump frames goes out after every frame produced before it",
        arguments: [false, true]
    )
    func closeDuringPumpComesLast(finishesQueuedReplies: Bool) throws {
        let handler = BLIPWebSocketHandler(settings: Self.settings(.server))
        let channel = try Self.channel(handler)
        var reason = BLIPCloseReason(.protocolError, "engine failed")
        reason.finishesQueuedReplies = finishesQueuedReplies
        let sink = ClosingSink(closeAfter: 2, reason: reason, total: 4)
        sink.handler = handler
        handler.start(sink)
        channel.embeddedEventLoop.run()
        let written = try Self.writes(on: channel).flatMap { $0 }
        let frames = Self.frames(in: written)
        #expect(frames.map(\.opcode) == [2, 2, 2, 2, 8])
        #expect(frames.prefix(4).map { String(decoding: $0.payload, as: UTF8.self) } == ["m1", "m2", "m3", "m4"])
        #expect(sink.closedWith?.code == .protocolError)
        _ = try? channel.finish(acceptAlreadyClosed: true)
    }

    /// Regression: the pump a decoder error runs first can end in a close of its own (the connection's
    /// engine failed while framing); the decoder error's close then found a close frame already sent and left
    /// the connection open, waiting for a peer close frame that could no longer be read.
    @Test("a decoder error whose pump closed first still ends the connection at once")
    func decoderErrorAfterACloseDuringItsPump() throws {
        let handler = BLIPWebSocketHandler(settings: Self.settings(.server))
        let channel = try Self.channel(handler)
        let sink = ClosingSink(closeAfter: 1, reason: BLIPCloseReason(.protocolError, "engine failed"), total: 0)
        sink.handler = handler
        handler.start(sink)
        sink.total = 2
        // FIN + ping, masked, 16-bit length 126: the decoder refuses it.
        try channel.writeInbound(ByteBuffer(bytes: [0x89, 0xFE, 0x00, 0x7E, 1, 2, 3, 4]))
        let written = try Self.writes(on: channel).flatMap { $0 }
        #expect(Self.frames(in: written).map(\.opcode) == [2, 2, 8])
        #expect(!channel.isActive)
        channel.embeddedEventLoop.run()
    }

    @Test("where NIO's frame encoder is in the pipeline, frames go to it")
    func framesGoToNIOsEncoder() throws {
        let handler = BLIPWebSocketHandler(settings: Self.settings(.server))
        let channel = EmbeddedChannel()
        try channel.pipeline.syncOperations.addHandler(WebSocketFrameEncoder())
        try channel.pipeline.syncOperations.addHandler(
            ByteToMessageHandler(UnmaskingFrameDecoder(maximumFrameSize: 1 << 20))
        )
        try channel.pipeline.syncOperations.addHandler(handler)
        try channel.connect(to: SocketAddress(ipAddress: "127.0.0.1", port: 9)).wait()
        handler.start(RawEndpoint(mode: .echo))
        try channel.writeInbound(ByteBuffer(bytes: [0x82, 0x83, 0, 0, 0, 0, 7, 8, 9]))
        channel.embeddedEventLoop.run()
        let written = try Self.writes(on: channel).flatMap { $0 }
        #expect(written == [0x82, 0x03, 7, 8, 9])
        _ = try? channel.finish(acceptAlreadyClosed: true)
    }

    @Test("messages that arrived with the close frame before the connection started are delivered first")
    func earlyMessagesThenClose() throws {
        let handler = BLIPWebSocketHandler(settings: Self.settings(.client))
        let channel = try Self.channel(handler)
        try channel.writeInbound(ByteBuffer(bytes: [0x81, 0x03] + Array("301".utf8)))  // text, unmasked
        try channel.writeInbound(ByteBuffer(bytes: [0x88, 0x02, 0x03, 0xE8]))  // close 1000
        let sink = RecordingSink()
        handler.start(sink)
        #expect(sink.events == ["text 301", "closed normally"])
        _ = try channel.finish(acceptAlreadyClosed: true)
        channel.embeddedEventLoop.run()
    }
}

/// Hands the pump `total` small messages; after the `closeAfter`-th it closes the handler from inside
/// `nextMessage`, as the connection does when its engine fails while framing.
final class ClosingSink: FrameSink, @unchecked Sendable {
    let closeAfter: Int
    let reason: BLIPCloseReason
    var total: Int
    var handler: BLIPWebSocketHandler?
    private(set) var produced = 0
    private(set) var closedWith: BLIPCloseStatus?

    init(closeAfter: Int, reason: BLIPCloseReason, total: Int) {
        self.closeAfter = closeAfter
        self.reason = reason
        self.total = total
    }

    func received(_ message: ByteBuffer, isText: Bool) -> Bool { true }

    func nextMessage(into buffer: inout ByteBuffer) -> MessageKind? {
        guard self.produced < self.total else { return nil }
        self.produced += 1
        buffer.writeString("m\(self.produced)")
        if self.produced == self.closeAfter { self.handler?.close(self.reason) }
        return .binary
    }

    func closed(_ status: BLIPCloseStatus) { self.closedWith = status }
}

/// Echoes every binary message, as a BLIP connection answers requests at once (a synchronous handler).
final class EchoSink: FrameSink, @unchecked Sendable {
    let writesWithinReadBatch: Bool
    private var queued: [ByteBuffer] = []
    /// After this many echoes, the sink closes the handler from inside `nextMessage`, as a connection whose
    /// engine fails while framing does.
    var closeAfter: Int?
    var handler: BLIPWebSocketHandler?
    private var produced = 0

    init(writesWithinReadBatch: Bool) {
        self.writesWithinReadBatch = writesWithinReadBatch
    }

    func received(_ message: ByteBuffer, isText: Bool) -> Bool {
        self.queued.append(message)
        return true
    }

    func nextMessage(into buffer: inout ByteBuffer) -> MessageKind? {
        guard !self.queued.isEmpty else { return nil }
        var message = self.queued.removeFirst()
        buffer.writeBuffer(&message)
        self.produced += 1
        if self.produced == self.closeAfter { self.handler?.close(BLIPCloseReason(.protocolError, "engine failed")) }
        return .binary
    }

    func closed(_ status: BLIPCloseStatus) {}
}

/// Records what the handler hands over.
final class RecordingSink: FrameSink {
    private let recorded = NIOLockedValueBox<[String]>([])

    var events: [String] { self.recorded.withLockedValue { $0 } }

    func received(_ message: ByteBuffer, isText: Bool) -> Bool {
        self.recorded.withLockedValue { $0.append("\(isText ? "text" : "binary") \(String(buffer: message))") }
        return true
    }

    func nextMessage(into buffer: inout ByteBuffer) -> MessageKind? { nil }

    func closed(_ status: BLIPCloseStatus) {
        self.recorded.withLockedValue { $0.append(status.failure.map { "closed: \($0)" } ?? "closed normally") }
    }
}

@Suite("UTF-8 validation")
struct UTF8ValidatorTests {
    static func validate(_ bytes: [UInt8], splitAt cuts: [Int] = []) -> Bool {
        var validator = UTF8Validator()
        var start = 0
        for end in cuts + [bytes.count] {
            let ok = bytes[start..<end].withUnsafeBytes { validator.feed($0) }
            if !ok { return false }
            start = end
        }
        return validator.isComplete
    }

    @Test("agrees with the standard library on every 1- to 3-byte input with a lead byte, and samples of 4")
    func agreesWithStandardLibrary() {
        var random = SystemRandomNumberGenerator()
        var inputs: [[UInt8]] = (0...255).map { [UInt8($0)] }
        for first in 0xC0...0xFF {
            for second in 0...255 {
                inputs.append([UInt8(first), UInt8(second)])
                inputs.append([UInt8(first), UInt8(second), 0x80 | UInt8(second & 0x3F)])
                inputs.append([UInt8(first), UInt8(second), 0x80, 0xBF])
            }
        }
        for _ in 0..<5_000 {
            inputs.append(
                (0..<Int.random(in: 1...24, using: &random)).map { _ in UInt8.random(in: 0...255, using: &random) }
            )
        }
        for bytes in inputs {
            let expected = String(validating: bytes, as: UTF8.self) != nil
            #expect(Self.validate(bytes) == expected, "\(bytes)")
            // Fed in two pieces, cut anywhere, the answer is the same.
            for cut in 0...bytes.count where bytes.count <= 4 {
                #expect(Self.validate(bytes, splitAt: [cut]) == expected, "\(bytes) cut at \(cut)")
            }
        }
    }

    @Test("long ASCII runs take the fast path; a bad byte after one is still found")
    func asciiRuns() {
        let ascii = Array(repeating: UInt8(ascii: "a"), count: 1000)
        #expect(Self.validate(ascii))
        #expect(!Self.validate(ascii + [0xFF] + ascii))
        #expect(Self.validate(ascii + Array("κόσμε".utf8) + ascii, splitAt: [1001, 1003]))
        #expect(!Self.validate(ascii + [0xED, 0xA0, 0x80]))  // a surrogate
        #expect(!Self.validate(ascii + [0xF4, 0x90, 0x80, 0x80]))  // above U+10FFFF
        #expect(!Self.validate(ascii + [0xE0, 0x80, 0xAF]))  // overlong
    }
}
