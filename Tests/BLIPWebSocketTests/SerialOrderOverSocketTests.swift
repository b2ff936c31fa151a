import BLIP
import BLIPTestSupport
import BLIPWebSocket
import NIOCore
import Testing

/// `.serial` over a real loopback WebSocket, in every dialect: requests reach their handlers in the order they
/// were sent, whatever order their last frames arrived in.
@Suite("Serial order over a loopback WebSocket", .timeLimit(.minutes(3)))
struct SerialOrderOverSocketTests {
    static let dialects: [(BLIPDialect, [String], Bool)] = [
        (.blip3, ["BLIP_3+CBMobile_3"], false), (.blip2, ["BLIP"], false), (.seed, [], true),
    ]

    /// Runs `body` with a client connected, in `dialect`, to a server whose handlers record their order.
    static func withSerialServer(
        _ dialect: (BLIPDialect, [String], Bool),
        _ log: OrderLog,
        _ body: @escaping @Sendable (BLIPConnection) async throws -> Void
    ) async throws {
        var serverConfiguration = BLIPWebSocketServer.Configuration.forTests
        serverConfiguration.acceptsSeedDialect = dialect.2
        try await withServer(serverConfiguration, router: log.serialRouter()) { server in
            var configuration = BLIPWebSocketClient.Configuration()
            configuration.subprotocols = dialect.1
            configuration.usesSeedDialect = dialect.2
            try await BLIPWebSocketClient.connect(
                to: "ws://127.0.0.1:\(server.port)/",
                configuration: configuration
            ) { connection in
                #expect(connection.dialect == dialect.0)
                try await body(connection)
            }
        }
    }

    @Test("a 4 MiB request and then a small one: handled in that order", arguments: 0..<3)
    func bigThenSmall(dialect: Int) async throws {
        let log = OrderLog()
        try await Self.withSerialServer(Self.dialects[dialect], log) { connection in
            let replies = Replies()
            connection.sendRequest(
                BLIPRequest(profile: "record", properties: ["Seq": "0"], body: pattern(4 << 20)),
                onReply: replies.record
            )
            connection.sendRequest(BLIPRequest(profile: "record", properties: ["Seq": "1"]), onReply: replies.record)
            try await replies.wait(for: 2)
            #expect(replies.failures == 0)
        }
        #expect(log.sequence == [0, 1])
    }

    @Test("200 requests of mixed sizes (0-300 KB) queued in order run in that order", arguments: 0..<3)
    func mixedSizes(dialect: Int) async throws {
        let log = OrderLog()
        var random = SeededRandom(seed: 200)
        let sizes = (0..<200).map { _ in Int(random.next() % 300_001) }
        try await Self.withSerialServer(Self.dialects[dialect], log) { connection in
            let replies = Replies()
            for (index, size) in sizes.enumerated() {
                let request = BLIPRequest(profile: "record", properties: ["Seq": "\(index)"], body: pattern(size))
                connection.sendRequest(request, onReply: replies.record)
            }
            try await replies.wait(for: sizes.count)
            #expect(replies.failures == 0)
        }
        #expect(log.sequence == Array(0..<200))
        #expect(log.mostAtOnce == 1)
    }
}
