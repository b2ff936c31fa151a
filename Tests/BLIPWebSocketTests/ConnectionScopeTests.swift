import BLIP
import BLIPTestSupport
import BLIPWebSocket
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import Testing

/// The server's per-connection scope (`run(onConnection:)`): an async closure in the connection's own task,
/// beside its handlers, cancelled when the connection closes; its error closes the connection with 1011.
@Suite("The server's per-connection scope", .timeLimit(.minutes(2)))
struct ConnectionScopeTests {
    typealias Scope = @Sendable (BLIPWebSocketServer.AcceptedConnection) async throws -> Void

    /// Serves with `scope` as every connection's scope while `body` runs.
    static func withScopedServer(
        router: BLIPRouter = standardRouter(),
        scope: @escaping Scope,
        _ body: @Sendable (BLIPWebSocketServer) async throws -> Void
    ) async throws {
        var configuration = BLIPWebSocketServer.Configuration.forTests
        configuration.port = 0
        let server = try await BLIPWebSocketServer.bind(configuration: configuration, router: router)
        async let serving: Void = server.run(onConnection: scope)
        do {
            try await body(server)
        } catch {
            await server.close()
            await serving
            throw error
        }
        await server.close()
        await serving
    }

    @Test("a feed pushed from the scope arrives whole and in order; the peer's close cancels the scope")
    func pushedFeed() async throws {
        let cancelledAt = NIOLockedValueBox<ContinuousClock.Instant?>(nil)
        let feedSent = NIOLockedValueBox(0)
        let log = OrderLog()
        var clientRouter = BLIPRouter(handlerOrder: .serial)
        clientRouter.register(profile: "changes") { request, context in
            log.enter(request, context)
            log.leave()
            return BLIPResponse()
        }
        let scope: Scope = { accepted in
            for seq in 0..<1_000 {
                try await accepted.connection.sendNoReply(
                    BLIPRequest(profile: "changes", properties: ["Seq": "\(seq)"], text: "[[\(seq)]]")
                )
                feedSent.withLockedValue { $0 += 1 }
            }
            // Then waits for more changes, as a continuous feed does, until the connection closes.
            do {
                try await Task.sleep(for: .seconds(3_600))
            } catch {
                cancelledAt.withLockedValue { $0 = .now }
                throw error
            }
        }
        try await Self.withScopedServer(scope: scope) { [clientRouter] server in
            let closedAt = try await BLIPWebSocketClient.connect(
                to: "ws://127.0.0.1:\(server.port)/",
                router: clientRouter
            ) { connection in
                for _ in 0..<3_000 where log.sequence.count < 1_000 { try await Task.sleep(for: .milliseconds(10)) }
                let closedAt = ContinuousClock.now
                await connection.close()
                return closedAt
            }
            for _ in 0..<500 where cancelledAt.withLockedValue({ $0 }) == nil {
                try await Task.sleep(for: .milliseconds(2))
            }
            let cancelled = try #require(cancelledAt.withLockedValue { $0 }, "the scope was not cancelled")
            let delay = cancelled - closedAt
            print("scope cancelled \(delay) after the client's close")
            // A hang shows here; the time itself is what the closing note reports.
            #expect(delay < .seconds(2))
        }
        #expect(feedSent.withLockedValue { $0 } == 1_000)
        #expect(log.sequence == Array(0..<1_000))
    }

    @Test("a scope that throws closes its connection with 1011; pending requests fail with that close")
    func failingScope() async throws {
        var router = standardRouter()
        router.register(profile: "hold") { _, _ in
            try await Task.sleep(for: .seconds(3_600))
            return BLIPResponse()
        }
        struct ScopeFailure: Error {}
        let started = AsyncStream.makeStream(of: Void.self)
        let failNow = Gate()
        let scope: Scope = { _ in
            started.continuation.yield()
            await failNow.wait()
            throw ScopeFailure()
        }
        try await Self.withScopedServer(router: router, scope: scope) { server in
            let error = await #expect(throws: BLIPConnectionError.self) {
                try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:\(server.port)/") { connection in
                    for await _ in started.stream { break }
                    let pending = connection.enqueueRequest(BLIPRequest(profile: "hold"))
                    try await Task.sleep(for: .milliseconds(50))
                    failNow.open()
                    _ = try await pending.reply()
                }
            }
            #expect(error?.closeStatus?.code == .internalError && error?.closeStatus?.initiator == .peer)
        }
    }

    @Test("a scope that returns leaves the connection open; handlers ran meanwhile")
    func returningScope() async throws {
        let scopeEnded = NIOLockedValueBox(false)
        let scope: Scope = { accepted in
            let reply = try await accepted.connection.sendRequest(BLIPRequest(profile: "hello"))
            #expect(String(buffer: reply.body) == "hi")
            scopeEnded.withLockedValue { $0 = true }
        }
        try await Self.withScopedServer(scope: scope) { server in
            var clientRouter = BLIPRouter()
            clientRouter.register(profile: "hello") { _, _ in BLIPResponse(text: "hi") }
            try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:\(server.port)/", router: clientRouter) {
                connection in
                for _ in 0..<500 where !scopeEnded.withLockedValue({ $0 }) {
                    try await Task.sleep(for: .milliseconds(10))
                }
                let echoed = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "still open"))
                #expect(String(buffer: echoed.body) == "still open")
            }
        }
        #expect(scopeEnded.withLockedValue { $0 })
    }
}
