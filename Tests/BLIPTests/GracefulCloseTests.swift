import BLIPEngine
import BLIPTestSupport
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import Synchronization
import Testing

@testable import BLIP

/// `closeGracefully`: what is in flight finishes, nothing new starts, then 1001; every way it can end.
@Suite("Graceful close", .timeLimit(.minutes(3)))
struct GracefulCloseTests {
    /// A router whose `gated` handler answers once `latch` opens; `echo` answers at once.
    static func gatedRouter(_ latch: Gate) -> BLIPRouter {
        var router = standardRouter()
        router.register(profile: "gated") { request, _ in
            await latch.wait()
            return BLIPResponse(text: "done \(request.properties["N"] ?? "")")
        }
        return router
    }

    /// Two connections over an in-memory pair, both running; `body` gets (server, client). `latch` is
    /// opened once the connections are closed, so that gated handlers (which ignore cancellation) end.
    static func withPair<T: Sendable>(
        releasing latch: Gate? = nil,
        serverRouter: BLIPRouter,
        clientRouter: BLIPRouter = standardRouter(),
        serverConfiguration: BLIPConnection.Configuration = .init(),
        _ body: (BLIPConnection, BLIPConnection) async throws -> T
    ) async throws -> T {
        let (clientEnd, serverEnd) = BLIPInMemoryTransport.makePair(dialect: .blip3)
        let server = BLIPConnection(transport: serverEnd, configuration: serverConfiguration, router: serverRouter)
        let client = BLIPConnection(transport: clientEnd, router: clientRouter)
        async let serverRun = server.run()
        async let clientRun = client.run()
        let result = try await body(server, client)
        await server.close()
        latch?.open()
        _ = await (serverRun, clientRun)
        #expect(client.core.pendingBookkeeping == 0 && server.core.pendingBookkeeping == 0)
        return result
    }

    @Test("a request being handled finishes and its reply arrives; new ones get ERR 503; then 1001")
    func handledRequestFinishes() async throws {
        let latch = Gate()
        try await Self.withPair(releasing: latch, serverRouter: Self.gatedRouter(latch)) { server, client in
            let inFlight = Task { try await client.sendRequest(BLIPRequest(profile: "gated", properties: ["N": "1"])) }
            try await waitUntil { server.statistics.framesReceived >= 1 }

            let closing = Task { await server.closeGracefully(drainTimeout: .seconds(60)) }
            try await waitUntil { server.core.state.withLockedValue { $0.isDraining } }

            // Something new is refused while the old one is still running.
            let refused = await #expect(throws: BLIPError.self) {
                try await client.sendRequest(BLIPRequest(profile: "echo", text: "late"))
            }
            #expect(refused?.domain == .blip && refused?.code == .busy)
            #expect(server.statistics.requestsRefusedClosing == 1)
            #expect(!server.isClosed)

            latch.open()
            let reply = try await inFlight.value
            #expect(String(buffer: reply.body) == "done 1")

            let status = await closing.value
            #expect(status.code == .goingAway && status.initiator == .local && status.reason == "going away")
            let clientStatus = await client.core.closed()
            #expect(clientStatus.code == .goingAway && clientStatus.initiator == .peer && clientStatus.isNormal)
        }
    }

    @Test("a request of ours gets its reply before the close")
    func ownRequestGetsReply() async throws {
        let latch = Gate()
        try await Self.withPair(releasing: latch, serverRouter: standardRouter(), clientRouter: Self.gatedRouter(latch))
        {
            server,
            client in
            let inFlight = Task { try await server.sendRequest(BLIPRequest(profile: "gated", properties: ["N": "2"])) }
            try await waitUntil { client.statistics.framesReceived >= 1 }

            let closing = Task { await server.closeGracefully(drainTimeout: .seconds(60)) }
            try await waitUntil { server.core.state.withLockedValue { $0.isDraining } }
            try await Task.sleep(for: .milliseconds(50))
            #expect(!server.isClosed)  // still waiting for the reply

            latch.open()
            #expect(try await String(buffer: inFlight.value.body) == "done 2")
            #expect(await closing.value.code == .goingAway)
        }
    }

    @Test("a request whose body is still arriving to a streaming handler is read to its end and answered")
    func streamingRequestFinishes() async throws {
        var router = BLIPRouter()
        router.registerStreaming(profile: "sink") { request, _ in
            var total = 0
            for try await piece in request.body { total += piece.readableBytes }
            return BLIPResponse(properties: ["Count": "\(total)"])
        }
        try await Self.withPair(serverRouter: router) { server, client in
            let (body, pieces) = AsyncStream.makeStream(of: ByteBuffer.self)
            let upload = Task { try await client.sendRequest(BLIPRequest(profile: "sink"), body: body) }
            pieces.yield(ByteBuffer(repeating: 1, count: 1000))
            pieces.yield(ByteBuffer(repeating: 1, count: 1000))  // read one ahead: the first leaves now
            try await waitUntil { server.statistics.bytesReceived >= 1000 }

            let closing = Task { await server.closeGracefully(drainTimeout: .seconds(60)) }
            try await waitUntil { server.core.state.withLockedValue { !$0.drainWaiters.isEmpty } }
            try await Task.sleep(for: .milliseconds(50))
            #expect(!server.isClosed)

            pieces.yield(ByteBuffer(repeating: 2, count: 500))
            pieces.finish()
            #expect(try await upload.value.properties["Count"] == "2500")
            #expect(await closing.value.code == .goingAway)
        }
    }

    @Test("a streamed request that begins during the close gets ERR 503 once it has arrived; its handler never runs")
    func streamingRequestBegunWhileClosingIsRefused() async throws {
        let latch = Gate()
        var router = Self.gatedRouter(latch)
        let sinkRan = NIOLockedValueBox(false)
        router.registerStreaming(profile: "sink") { request, _ in
            sinkRan.withLockedValue { $0 = true }
            for try await _ in request.body {}
            return BLIPResponse()
        }
        try await Self.withPair(releasing: latch, serverRouter: router) { server, client in
            let held = Task { try await client.sendRequest(BLIPRequest(profile: "gated", properties: ["N": "3"])) }
            try await waitUntil { server.statistics.framesReceived >= 1 }
            let closing = Task { await server.closeGracefully(drainTimeout: .seconds(60)) }
            try await waitUntil { server.core.state.withLockedValue { !$0.drainWaiters.isEmpty } }

            let (body, pieces) = AsyncStream.makeStream(of: ByteBuffer.self)
            let upload = Task { try await client.sendRequest(BLIPRequest(profile: "sink"), body: body) }
            pieces.yield(ByteBuffer(repeating: 1, count: 1000))
            pieces.yield(ByteBuffer(repeating: 1, count: 1000))
            try await waitUntil { server.statistics.bytesReceived >= 1000 }
            pieces.yield(ByteBuffer(repeating: 2, count: 500))
            pieces.finish()
            let error = await #expect(throws: BLIPError.self) { try await upload.value }
            #expect(error?.code == .busy)
            #expect(server.statistics.requestsRefusedClosing == 1)
            #expect(!sinkRan.withLockedValue { $0 })

            latch.open()
            #expect(try await String(buffer: held.value.body) == "done 3")
            #expect(await closing.value.code == .goingAway)
        }
    }

    @Test("a whole request that began arriving before the close is handled, though it completes after")
    func wholeRequestBegunBeforeIsHandled() async throws {
        try await Self.withPair(serverRouter: standardRouter()) { server, client in
            let (body, pieces) = AsyncStream.makeStream(of: ByteBuffer.self)
            let upload = Task { try await client.sendRequest(BLIPRequest(profile: "echo"), body: body) }
            pieces.yield(ByteBuffer(repeating: 1, count: 1000))
            pieces.yield(ByteBuffer(repeating: 1, count: 1000))
            try await waitUntil { server.statistics.bytesReceived >= 1000 }

            let closing = Task { await server.closeGracefully(drainTimeout: .seconds(60)) }
            try await waitUntil { server.core.state.withLockedValue { !$0.drainWaiters.isEmpty } }
            pieces.yield(ByteBuffer(repeating: 2, count: 500))
            pieces.finish()
            #expect(try await upload.value.body.readableBytes == 2500)
            #expect(server.statistics.requestsRefusedClosing == 0)
            #expect(await closing.value.code == .goingAway)
        }
    }

    @Test("an unanswered request from incomingRequests holds the close until it is answered")
    func unhandledRequestIsWaitedFor() async throws {
        var configuration = BLIPConnection.Configuration()
        configuration.unhandledRequests = .deliver
        try await Self.withPair(serverRouter: BLIPRouter(), serverConfiguration: configuration) { server, client in
            let inFlight = Task { try await client.sendRequest(BLIPRequest(profile: "manual", text: "x")) }
            var iterator = server.incomingRequests.makeAsyncIterator()
            let incoming = try #require(await iterator.next())

            let closing = Task { await server.closeGracefully(drainTimeout: .seconds(60)) }
            try await waitUntil { server.core.state.withLockedValue { $0.isDraining } }
            try await Task.sleep(for: .milliseconds(50))
            #expect(!server.isClosed)

            try incoming.respond(BLIPResponse(text: "answered"))
            #expect(try await String(buffer: inFlight.value.body) == "answered")
            #expect(await closing.value.code == .goingAway)
        }
    }

    @Test("past the drain timeout it closes anyway; what is left fails with the 1001 status")
    func timeoutClosesAnyway() async throws {
        let latch = Gate()  // never opened
        try await Self.withPair(releasing: latch, serverRouter: Self.gatedRouter(latch)) { server, client in
            let inFlight = Task { try await client.sendRequest(BLIPRequest(profile: "gated")) }
            try await waitUntil { server.statistics.framesReceived >= 1 }

            let started = ContinuousClock.now
            let status = await server.closeGracefully(drainTimeout: .milliseconds(300), reason: "maintenance")
            let waited = ContinuousClock.now - started
            #expect(waited >= .milliseconds(300))
            #expect(status.code == .goingAway && status.reason == "maintenance")

            let error = await #expect(throws: BLIPConnectionError.self) { try await inFlight.value }
            #expect(error?.code == .connectionClosed)
            #expect(error?.closeStatus?.code == .goingAway && error?.closeStatus?.initiator == .peer)
        }
    }

    @Test("with nothing in flight it closes at once")
    func idleClosesAtOnce() async throws {
        try await Self.withPair(serverRouter: standardRouter()) { server, client in
            let reply = try await client.sendRequest(BLIPRequest(profile: "echo", text: "a"))
            #expect(String(buffer: reply.body) == "a")
            let status = await server.closeGracefully(drainTimeout: .seconds(3600))
            #expect(status.code == .goingAway)
        }
    }

    @Test("cancelling the caller stops the wait and closes at once")
    func cancellationClosesAtOnce() async throws {
        let latch = Gate()  // never opened
        try await Self.withPair(releasing: latch, serverRouter: Self.gatedRouter(latch)) { server, client in
            let inFlight = Task { try await client.sendRequest(BLIPRequest(profile: "gated")) }
            try await waitUntil { server.statistics.framesReceived >= 1 }
            let closing = Task { await server.closeGracefully(drainTimeout: .seconds(3600)) }
            try await waitUntil { server.core.state.withLockedValue { !$0.drainWaiters.isEmpty } }
            closing.cancel()
            #expect(await closing.value.code == .goingAway)
            await #expect(throws: BLIPConnectionError.self) { try await inFlight.value }
            #expect(server.core.state.withLockedValue { $0.drainWaiters.isEmpty })
        }
    }

    @Test("the peer closing first ends the wait with the peer's status")
    func peerClosesFirst() async throws {
        let latch = Gate()  // never opened
        try await Self.withPair(releasing: latch, serverRouter: Self.gatedRouter(latch)) { server, client in
            let inFlight = Task { try await client.sendRequest(BLIPRequest(profile: "gated")) }
            try await waitUntil { server.statistics.framesReceived >= 1 }
            let closing = Task { await server.closeGracefully(drainTimeout: .seconds(3600)) }
            try await waitUntil { server.core.state.withLockedValue { !$0.drainWaiters.isEmpty } }
            await client.close(code: 4002, reason: "bye")
            let status = await closing.value
            #expect(status.code == 4002 && status.initiator == .peer)
            await #expect(throws: BLIPConnectionError.self) { try await inFlight.value }
        }
    }

    /// Regression: the engine's table of the peer's unanswered requests moved the long request out of its
    /// window while the others came and went; updated when it completed, with the window empty, it was
    /// counted twice, so once it was answered one request still seemed to owe a reply and a graceful close
    /// waited for its whole timeout.
    @Test("a request still arriving while 200 others come and go, then answered: nothing owes a reply")
    func longRequestAmongMany() async throws {
        try await Self.withPair(serverRouter: standardRouter()) { server, client in
            let (body, feed) = AsyncStream.makeStream(of: ByteBuffer.self)
            let long = Task { try await client.sendRequest(BLIPRequest(profile: "echo"), body: body) }
            feed.yield(ByteBuffer(string: "first"))
            try await waitUntil { server.core.state.withLockedValue { $0.engine.unansweredCount } == 1 }
            for index in 0..<200 {
                let reply = try await client.sendRequest(BLIPRequest(profile: "echo", text: "\(index)"))
                #expect(String(buffer: reply.body) == "\(index)")
            }
            feed.yield(ByteBuffer(string: " last"))
            feed.finish()
            #expect(String(buffer: try await long.value.body) == "first last")
            #expect(server.core.state.withLockedValue { $0.engine.unansweredCount } == 0)
            #expect(await server.core.drain(timeout: .seconds(5)), "the drain found something in flight")
        }
    }

    @Test("many requests in flight all get their replies before the close")
    func manyInFlight() async throws {
        let latch = Gate()
        var configuration = BLIPConnection.Configuration()
        configuration.maximumConcurrentHandlers = 8  // four of them wait for a slot (reading pauses at eight)
        try await Self.withPair(
            releasing: latch,
            serverRouter: Self.gatedRouter(latch),
            serverConfiguration: configuration
        ) {
            server,
            client in
            let count = 12
            let replies = Task {
                try await withThrowingTaskGroup(of: String?.self) { group in
                    for index in 0..<count {
                        group.addTask {
                            String(
                                buffer: try await client.sendRequest(
                                    BLIPRequest(profile: "gated", properties: ["N": "\(index)"])
                                ).body
                            )
                        }
                    }
                    var texts: Set<String> = []
                    for try await text in group { if let text { texts.insert(text) } }
                    return texts
                }
            }
            try await waitUntil { server.core.state.withLockedValue { $0.engine.unansweredCount } == count }
            #expect(server.statistics.requestsQueuedForHandler == count - 8)
            let closing = Task { await server.closeGracefully(drainTimeout: .seconds(60)) }
            try await waitUntil { server.core.state.withLockedValue { !$0.drainWaiters.isEmpty } }
            latch.open()
            let texts = try await replies.value
            #expect(texts == Set((0..<count).map { "done \($0)" }))
            #expect(await closing.value.code == .goingAway)
        }
    }
}
