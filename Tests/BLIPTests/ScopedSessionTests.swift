import BLIP
import NIOCore
import Synchronization
import Testing

/// `withBLIPConnection`: the body runs on the caller's actor, and the session ends with the connection.
@Suite("Scoped sessions", .timeLimit(.minutes(3)))
struct ScopedSessionTests {
    /// A client that waits for requests the server pushes, the way a replicator waits for `changes`.
    actor PushedRequestsClient {
        var received: [String] = []
        var bodyWasCancelled = false

        func waitForPushes(over transport: BLIPInMemoryTransport) async throws {
            let (pushes, continuation) = AsyncStream.makeStream(of: String.self)
            var router = BLIPRouter()
            router.register(profile: "changes") { request, _ in
                continuation.yield(String(buffer: request.body))
                return BLIPResponse()
            }
            try await withBLIPConnection(over: transport, router: router) { _ in
                self.assertIsolated()  // the body runs on this actor: its state is used without hopping
                for await push in pushes { self.received.append(push) }
                self.bodyWasCancelled = Task.isCancelled
            }
        }
    }

    @Test("when the peer closes, a body waiting for pushed requests is cancelled and the call throws the status")
    func peerCloseEndsTheSession() async throws {
        let (clientEnd, serverEnd) = BLIPInMemoryTransport.makePair(dialect: .blip3)
        let server = BLIPConnection(transport: serverEnd)
        async let serverRun = server.run()
        let client = PushedRequestsClient()
        let session = Task { try await client.waitForPushes(over: clientEnd) }
        _ = try await server.sendRequest(BLIPRequest(profile: "changes", text: "1"))
        _ = try await server.sendRequest(BLIPRequest(profile: "changes", text: "2"))
        await server.close(code: 4001, reason: "done with you")
        let error = await #expect(throws: BLIPConnectionError.self) { try await session.value }
        #expect(error?.closeStatus?.code == 4001 && error?.closeStatus?.initiator == .peer)
        #expect(await client.received == ["1", "2"])
        #expect(await client.bodyWasCancelled)
        #expect(!session.isCancelled, "the caller's task is not cancelled, only the body's")
        _ = await serverRun
    }

    @Test("the caller's task stays usable: a second session in the same task works")
    func callerNotCancelled() async throws {
        for round in 0..<2 {
            let (clientEnd, serverEnd) = BLIPInMemoryTransport.makePair(dialect: .blip3)
            let server = BLIPConnection(transport: serverEnd)
            async let serverRun = server.run()
            let closing = Task {
                try await Task.sleep(for: .milliseconds(50))
                await server.close(code: .goingAway)
            }
            let error = await #expect(throws: BLIPConnectionError.self) {
                try await withBLIPConnection(over: clientEnd) { _ in
                    try await Task.sleep(for: .seconds(3600))
                }
            }
            #expect(error?.closeStatus?.code == .goingAway, "round \(round)")
            #expect(!Task.isCancelled)
            try await Task.sleep(for: .milliseconds(1))  // throws if this task had been cancelled
            try await closing.value
            _ = await serverRun
        }
    }

    @Test("a body that finishes returns its value and closes normally; one that throws rethrows")
    func bodyEnds() async throws {
        let peers = InMemoryPeers(router: standardRouter())
        let value = try await peers.run { connection in
            try await connection.sendRequest(BLIPRequest(profile: "echo", text: "hi")).body.readableBytes
        }
        #expect(value == 2)
        #expect(peers.serverConnection.closeStatus?.isNormal == true)

        struct Mine: Error {}
        let other = InMemoryPeers(router: standardRouter())
        await #expect(throws: Mine.self) {
            try await other.run { _ in throw Mine() }
        }
        #expect(other.serverConnection.closeStatus?.isNormal == true)
    }

    @Test("closed by the application: the body's value stands; closed by the peer: the call throws regardless")
    func valueAfterClose() async throws {
        let (clientEnd, serverEnd) = BLIPInMemoryTransport.makePair(dialect: .blip3)
        let server = BLIPConnection(transport: serverEnd)
        async let serverRun = server.run()
        let value = try await withBLIPConnection(over: clientEnd) { connection in
            await connection.close(code: 4000, reason: "done")
            try? await Task.sleep(for: .milliseconds(20))  // the session notices the close meanwhile
            return 42
        }
        #expect(value == 42)
        #expect(await serverRun.code == 4000)

        let error = await Self.peerClosesDuringBody(lingering: .milliseconds(20))
        #expect(error?.closeStatus?.initiator == .peer)
    }

    /// A session whose peer closes the connection while the body runs; the body waits until it sees the
    /// close, lingers, and returns 42 (ignoring its cancellation). What the call threw, if it threw
    /// `BLIPConnectionError` as it must.
    static func peerClosesDuringBody(lingering: Duration) async -> BLIPConnectionError? {
        let (client, server) = BLIPInMemoryTransport.makePair(dialect: .blip3)
        let peer = BLIPConnection(transport: server)
        async let peerRun = peer.run()
        let error = await #expect(throws: BLIPConnectionError.self) {
            try await withBLIPConnection(over: client) { connection in
                await peer.close(code: .goingAway)
                while !connection.isClosed { try? await Task.sleep(for: .milliseconds(1)) }
                if lingering > .zero { try? await Task.sleep(for: lingering) }
                return 42
            }
        }
        _ = await peerRun
        return error
    }

    /// The body returns the moment it sees the peer's close, before the connection's run task can report it:
    /// the call still throws (it once returned the value when the run task lagged on a busy machine).
    @Test("closed by the peer just before the body returns: the call throws all the same")
    func peerCloseJustBeforeReturn() async throws {
        for _ in 0..<20 {
            let error = await Self.peerClosesDuringBody(lingering: .zero)
            #expect(error?.closeStatus?.initiator == .peer)
        }
    }
}
