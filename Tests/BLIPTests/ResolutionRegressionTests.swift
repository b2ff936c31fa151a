import BLIPEngine
import BLIPTestSupport
import BLIPWire
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import Synchronization
import Testing

@testable import BLIP

/// The bugs of "every request resolves exactly once" found by review, each reproduced as it was reported.
@Suite("Exactly once: regressions", .timeLimit(.minutes(2)))
struct ResolutionRegressionTests {
    // MARK: - Closing with unanswered requests buffered

    enum Ending: String, CaseIterable, Sendable {
        case localClose, peerClose, transportFailure, fatalFrame
    }

    /// Closing used to drop the buffered requests under the connection's lock; each one's deinit answers
    /// it, which takes the lock again (a crash in debug builds, a deadlock in release ones).
    @Test("a streaming handler that replies without reading its whole body: its reply arrives, not ERR 413")
    func replyWithoutReadingTheBody() async throws {
        // The unread rest is drained; the engine took a drained request for a refused one (too large) and
        // answered ERR BLIP/413 at its end, leaving the handler's reply queued forever.
        var router = BLIPRouter()
        router.registerStreaming(profile: "ignore") { _, _ in BLIPResponse(text: "early") }
        let peers = InMemoryPeers(router: router)
        try await peers.run { client in
            let (body, pieces) = AsyncStream.makeStream(of: ByteBuffer.self)
            let upload = Task { try await client.sendRequest(BLIPRequest(profile: "ignore"), body: body) }
            pieces.yield(ByteBuffer(repeating: 1, count: 1000))
            pieces.yield(ByteBuffer(repeating: 1, count: 1000))  // read one ahead: the first leaves now
            try await waitUntil { peers.serverConnection.statistics.bytesReceived >= 1000 }
            try await waitUntil { peers.serverConnection.core.state.withLockedValue { $0.engine.outgoingCount } == 1 }
            pieces.yield(ByteBuffer(repeating: 2, count: 500))
            pieces.finish()
            let reply = try await upload.value
            #expect(String(buffer: reply.body) == "early")
            try await waitUntil { peers.serverConnection.core.pendingBookkeeping == 0 }
        }
    }

    @Test("a connection with requests waiting in incomingRequests closes cleanly", arguments: Ending.allCases)
    func closeWithBufferedRequests(ending: Ending) async throws {
        let transport = ManualTransport()
        var configuration = BLIPConnection.Configuration()
        configuration.unhandledRequests = .deliver
        let connection = BLIPConnection(transport: transport, configuration: configuration)
        let peer = ScriptedPeer(transport: transport)
        for index in 0..<5 {
            _ = try peer.engine.enqueue(
                BLIPOutgoingMessage(.request, properties: ["Profile": "nobody-\(index)"], body: .buffer(ByteBuffer()))
            )
        }
        try peer.flush()
        #expect(!connection.isClosed)
        switch ending {
        case .localClose: await connection.close()
        case .peerClose: transport.fail(BLIPConnectionError(.connectionClosed, "the peer closed"))
        case .transportFailure: transport.fail(BLIPConnectionError(.transportFailed, "reset"))
        case .fatalFrame: transport.deliver(ByteBuffer(bytes: [0xFF, 0xFF, 0xFF]))
        }
        #expect(connection.isClosed)
        // The requests were answered by nobody: nothing may be written after the close.
        #expect(transport.drain().isEmpty)
        await connection.close()
    }

    /// Reading is paused by one thread (a request queued behind a busy handler) and resumed by another (the
    /// handler finishing), each deciding under the lock and calling the transport after it. When the calls
    /// land in the opposite order, the transport stayed paused with nothing left to resume it: the
    /// connection read nothing more (seen as "handlers beyond the concurrency limit wait in arrival order"
    /// stopping after 5 or 10 of 20 requests, about 1 run in 20). The transport here runs the resume inside
    /// the pause call, before the pause takes effect.
    @Test("a pause and a resume decided on two threads and applied in the opposite order leave reading on")
    func readingPauseAndResumeCross() async throws {
        let transport = ManualTransport()
        let gate = Gate()
        let handled = NIOLockedValueBox<[String]>([])
        let firstStarted = NIOLockedValueBox(false)
        var router = BLIPRouter()
        router.register(profile: "work") { request, _ in
            let name = request.properties["Name"] ?? ""
            if name == "first" {
                firstStarted.withLockedValue { $0 = true }
                await gate.wait()
            }
            handled.withLockedValue { $0.append(name) }
            return BLIPResponse()
        }
        var configuration = BLIPConnection.Configuration()
        configuration.maximumConcurrentHandlers = 1
        let connection = BLIPConnection(transport: transport, configuration: configuration, router: router)
        let running = Task { await connection.run() }
        let peer = UncheckedPeer(ScriptedPeer(transport: transport))
        try peer.send("first")
        // The first handler is running (and waits at the gate) once the request is read.
        for _ in 0..<500 where !firstStarted.withLockedValue({ $0 }) { try await Task.sleep(for: .milliseconds(10)) }
        // The second request queues behind it: reading pauses. Inside that pause call the first handler is
        // let go and finishes, the queue empties and reading resumes, before the pause takes effect.
        transport.setPauseHook {
            gate.open()
            for _ in 0..<500 where transport.resumeCount == 0 { Thread.sleep(forTimeInterval: 0.01) }
        }
        try await offThePool { try peer.send("second") }
        transport.setPauseHook(nil)
        #expect(transport.resumeCount >= 1, "the handler never resumed reading")
        #expect(!transport.isReadingPaused, "the transport was left paused")
        for _ in 0..<500 where handled.withLockedValue({ $0.count }) < 2 {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(handled.withLockedValue { $0 } == ["first", "second"])
        await connection.close()
        _ = await running.value
    }

    /// Log handlers are the application's code: one that reads the connection must never find its lock
    /// held. The hook takes the lock on every log call, at trace level, through a whole session.
    @Test("no log call is made while the connection's lock is held")
    func noLoggingUnderTheLock() async throws {
        let logs = CapturingLogHandler.Store()
        let watched = NIOLockedValueBox<BLIPConnection?>(nil)
        logs.setHook { _ = watched.withLockedValue { $0 }?.statistics }
        var router = standardRouter()
        router.registerStreaming(profile: "stream-sink") { request, _ in
            var total = 0
            for try await piece in request.body { total += piece.readableBytes }
            return BLIPResponse(text: "\(total)")
        }
        var serverConfiguration = BLIPConnection.Configuration()
        serverConfiguration.logsMessageBodies = true
        let (client, server) = BLIPInMemoryTransport.makePair()
        let serverConnection = BLIPConnection(
            transport: server,
            configuration: serverConfiguration,
            router: router,
            logger: logs.logger()
        )
        watched.withLockedValue { $0 = serverConnection }
        let serverRun = Task { await serverConnection.run() }
        try await withBLIPConnection(over: client) { connection in
            _ = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "hi", compressed: true))
            await #expect(throws: BLIPError.self) { try await connection.sendRequest(BLIPRequest(profile: "error")) }
            await #expect(throws: BLIPError.self) { try await connection.sendRequest(BLIPRequest(profile: "none")) }
            _ = try await connection.sendRequest(
                BLIPRequest(profile: "stream-sink"),
                body: ChunkedBody(total: 300_000, chunk: 40_000)
            )
            try await connection.sendNoReply(BLIPRequest(profile: "echo", text: "no reply"))
            _ = try await connection.sendRequest(BLIPRequest(profile: "echo", body: pattern(200_000)))
        }
        await serverConnection.close()
        _ = await serverRun.value
        #expect(!logs.messages(atLeast: .trace).isEmpty)
    }

    // MARK: - A large ERR answering a streamed reply

    /// Cancelling a call whose reply has started reaches the connection after the request's token was
    /// retired; the token used to be kept for good, as if for a request not yet queued.
    @Test("cancelling a call after its reply started leaves no token behind")
    func lateCancellation() async throws {
        let transport = ManualTransport()
        let connection = BLIPConnection(transport: transport)
        let peer = ScriptedPeer(transport: transport)
        let call = Task { try await connection.sendRequest(BLIPRequest(profile: "big")) }
        var number: UInt64?
        for _ in 0..<2_000 where number == nil {
            try peer.receive()
            number =
                peer.events.lazy.compactMap { event -> UInt64? in
                    guard case .messageStarted(let message) = event, message.type == .request else { return nil }
                    return message.id.number
                }.first
            try await Task.sleep(for: .milliseconds(1))
        }
        // A reply larger than the send window: its first frames arrive, the rest waits for ACKs.
        let requestNumber = try #require(number)
        _ = try peer.engine.enqueue(
            BLIPOutgoingMessage(.response(toRequest: requestNumber), properties: [:], body: .buffer(pattern(1 << 20)))
        )
        try peer.flush()
        call.cancel()
        // The reply is not abandoned once it has started: the call gets it.
        for _ in 0..<5_000 {
            try peer.receive()
            try peer.flush()
            if connection.core.pendingBookkeeping == 0 { break }
            try await Task.sleep(for: .milliseconds(1))
        }
        let reply = try await call.value
        #expect(reply.body.readableBytes == 1 << 20)
        #expect(connection.core.pendingBookkeeping == 0, "\(connection.stateDescription)")
        await connection.close()
    }

    @Test("a large ERR reply to sendRequestStreamingReply is thrown", arguments: [1_000, 600_000])
    func largeErrorToStreamedReply(size: Int) async throws {
        var router = BLIPRouter()
        router.register(profile: "fail") { _, _ in
            throw BLIPError(domain: "HTTP", code: 409, message: String(repeating: "x", count: size))
        }
        router.register(profile: "ok") { _, _ in BLIPResponse(text: "ok") }
        let peers = InMemoryPeers(router: router)
        try await peers.run { connection in
            let error = await #expect(throws: BLIPError.self) {
                _ = try await connection.sendRequestStreamingReply(BLIPRequest(profile: "fail"))
            }
            #expect(error?.code == 409)
            #expect(error?.message.utf8.count == size)
            // The connection is still fine afterwards.
            let reply = try await connection.sendRequest(BLIPRequest(profile: "ok"))
            #expect(String(buffer: reply.body) == "ok")
        }
    }

    // MARK: - A streamed request body that fails

    struct BodyFailure: Error, Equatable {}

    /// Yields `chunks` chunks of `chunkSize` bytes, then throws.
    struct FailingBody: AsyncSequence, Sendable {
        typealias Element = ByteBuffer
        let chunks: Int
        let chunkSize: Int

        func makeAsyncIterator() -> Iterator { Iterator(remaining: self.chunks, chunkSize: self.chunkSize) }

        struct Iterator: AsyncIteratorProtocol {
            var remaining: Int
            let chunkSize: Int

            mutating func next() async throws -> ByteBuffer? {
                guard self.remaining > 0 else { throw BodyFailure() }
                self.remaining -= 1
                return pattern(self.chunkSize)
            }
        }
    }

    @Test(
        "a body sequence that throws fails sendRequest(_:body:) with its error",
        arguments: [(0, 1), (1, 10), (6, 100_000)]
    )
    func failingBody(chunks: Int, chunkSize: Int) async throws {
        let peers = InMemoryPeers(router: standardRouter())
        let server = peers.serverConnection
        let serverRun = Task { await server.run() }
        let client = BLIPConnection(transport: peers.client)
        let clientRun = Task { await client.run() }
        await #expect(throws: BodyFailure.self) {
            _ = try await client.sendRequest(
                BLIPRequest(profile: "echo"),
                body: FailingBody(chunks: chunks, chunkSize: chunkSize)
            )
        }
        await client.close()
        await server.close()
        _ = await clientRun.value
        _ = await serverRun.value
    }

    /// Frames leave only when the test drains them, so the body fails before anything was sent.
    @Test("a body that fails before any frame left: nothing is sent and the connection goes on")
    func failingBodyBeforeSending() async throws {
        let transport = ManualTransport()
        let connection = BLIPConnection(transport: transport)
        await #expect(throws: BodyFailure.self) {
            _ = try await connection.sendRequest(BLIPRequest(profile: "x"), body: FailingBody(chunks: 0, chunkSize: 1))
        }
        #expect(transport.drain().isEmpty)
        #expect(!connection.isClosed)
        await connection.close()
    }

    /// BLIP cannot abort a message: a streamed body that fails after its first frame ends the connection,
    /// and the close says the failure was ours (1011), not the peer's.
    @Test("a body that fails after its first frame closes the connection with 1011")
    func bodyFailureClosesWith1011() async throws {
        let transport = ManualTransport()
        let connection = BLIPConnection(transport: transport)
        let peer = ScriptedPeer(transport: transport)
        let finished = NIOLockedValueBox(false)
        let call = Task {
            defer { finished.withLockedValue { $0 = true } }
            _ = try await connection.sendRequest(
                BLIPRequest(profile: "x"),
                body: FailingBody(chunks: 2, chunkSize: 100_000)
            )
        }
        // Frames and ACKs cross by hand until the call has ended (10 s at most).
        for _ in 0..<10_000 where !finished.withLockedValue({ $0 }) {
            try peer.receive()
            try peer.flush()
            try await Task.sleep(for: .milliseconds(1))
        }
        await #expect(throws: BodyFailure.self) { try await call.value }
        #expect(transport.closeReasons.map(\.code) == [.internalError])
    }

    // MARK: - Messages that cannot be encoded

    @Test("a handler's reply that cannot be encoded becomes ERR BLIP/500 and an error log")
    func unencodableReply() async throws {
        let logs = CapturingLogHandler.Store()
        var router = BLIPRouter()
        router.register(profile: "bad") { _, _ in BLIPResponse(properties: ["Bad": "a\u{0}b"], text: "never") }
        router.register(profile: "echo") { request, _ in BLIPResponse(body: request.body) }
        let (client, server) = BLIPInMemoryTransport.makePair()
        let serverConnection = BLIPConnection(transport: server, router: router, logger: logs.logger(level: .info))
        let serverRun = Task { await serverConnection.run() }
        try await withBLIPConnection(over: client) { connection in
            let error = await #expect(throws: BLIPError.self) {
                _ = try await connection.sendRequest(BLIPRequest(profile: "bad"))
            }
            #expect(error?.domain == .blip && error?.code == 500)
            let reply = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "still here"))
            #expect(String(buffer: reply.body) == "still here")
        }
        await serverConnection.close()
        _ = await serverRun.value
        #expect(logs.messages(atLeast: .error).contains { $0.contains("reply") })
    }

    @Test("an empty property value in the seed dialect: the handler's reply becomes ERR BLIP/500")
    func seedEmptyPropertyReply() async throws {
        var router = BLIPRouter()
        router.register(profile: "empty") { _, _ in BLIPResponse(properties: ["Empty": ""], text: "never") }
        let peers = InMemoryPeers(dialect: .seed, router: router)
        try await peers.run { connection in
            let error = await #expect(throws: BLIPError.self) {
                _ = try await connection.sendRequest(BLIPRequest(profile: "empty"))
            }
            #expect(error?.code == 500)
        }
    }

    @Test("a request that cannot be encoded throws invalidMessage and sends nothing")
    func unencodableRequest() async throws {
        let handled = NIOLockedValueBox(0)
        var router = BLIPRouter()
        router.register(profile: "count") { _, _ in
            handled.withLockedValue { $0 += 1 }
            return BLIPResponse()
        }
        let peers = InMemoryPeers(router: router)
        try await peers.run { connection in
            let bad = BLIPRequest(profile: "count", properties: ["Bad": "a\u{0}b"])
            for attempt in 0..<3 {
                let error = await #expect(throws: BLIPConnectionError.self) {
                    switch attempt {
                    case 0: _ = try await connection.sendRequest(bad)
                    case 1: try await connection.sendNoReply(bad)
                    default: _ = try await connection.sendRequestStreamingReply(bad)
                    }
                }
                #expect(error?.code == .invalidMessage)
            }
            #expect(connection.statistics.framesSent == 0)
            _ = try await connection.sendRequest(BLIPRequest(profile: "count"))
        }
        #expect(handled.withLockedValue { $0 } == 1)
    }
}

/// A scripted peer driven from one thread at a time, handed to a Dispatch thread by the test.
private final class UncheckedPeer: @unchecked Sendable {
    let peer: ScriptedPeer
    init(_ peer: ScriptedPeer) { self.peer = peer }

    func send(_ name: String) throws {
        _ = try self.peer.engine.enqueue(
            BLIPOutgoingMessage(.request, properties: ["Profile": "work", "Name": name], body: .buffer(ByteBuffer()))
        )
        try self.peer.flush()
    }
}
