import BLIP
import BLIPTestSupport
import NIOCore
import Testing

/// `PING`, Couchbase Lite for JavaScript's keepalive request: Sync Gateway answers it with an empty reply,
/// and so does every router unless the application registers its own handler.
@Suite("PING", .timeLimit(.minutes(1)))
struct PingTests {
    @Test("answered with an empty reply by default, in every dialect", arguments: BLIPDialect.allCases)
    func answeredByDefault(dialect: BLIPDialect) async throws {
        #expect(BLIPRouter().hasHandler(forProfile: "PING"))
        let peers = InMemoryPeers(dialect: dialect, router: BLIPRouter())
        try await peers.run { connection in
            let reply = try await connection.sendRequest(BLIPRequest(profile: "PING"))
            #expect(reply.properties.isEmpty && reply.body.readableBytes == 0)
            try await connection.sendNoReply(BLIPRequest(profile: "PING"))
        }
    }

    @Test("answered at once behind a slow serial handler (a keepalive does not wait its turn)")
    func answeredAtOnceInSerialOrder() async throws {
        var router = BLIPRouter(handlerOrder: .serial)
        let gate = Gate()
        router.register(profile: "slow") { _, _ in
            await gate.wait()
            return BLIPResponse(text: "slow")
        }
        let peers = InMemoryPeers(router: router)
        try await peers.run { connection in
            let slow = connection.enqueueRequest(BLIPRequest(profile: "slow"))
            _ = try await connection.sendRequest(BLIPRequest(profile: "PING"), timeout: .seconds(30))
            gate.open()
            #expect(String(buffer: try await slow.reply().body) == "slow")
        }
    }

    @Test("an application's own handler for PING replaces the built-in answer")
    func ownHandler() async throws {
        var router = BLIPRouter()
        router.register(profile: "PING") { _, _ in BLIPResponse(text: "pong") }
        let peers = InMemoryPeers(router: router)
        try await peers.run { connection in
            let reply = try await connection.sendRequest(BLIPRequest(profile: "PING"))
            #expect(String(buffer: reply.body) == "pong")
        }
    }
}
