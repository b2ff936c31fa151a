import BLIP
import BLIPWebSocket
import NIOConcurrencyHelpers
import NIOCore
import NIOWebSocket
import Synchronization
import Testing

/// Keepalive as LiteCore does it: a ping only after an interval of silence, a pong deadline, and a dead peer
/// found within the interval and the deadline; on the server, an idle timeout and a maximum connection age,
/// both ending with 1001.
@Suite("Keepalive, idle connections and connection age", .timeLimit(.minutes(2)))
struct KeepaliveTests {
    @Test("a peer that keeps sending is never pinged")
    func noPingWhileReceiving() async throws {
        let server = try await RawWebSocketServer { $0.first }
        var configuration = BLIPWebSocketClient.Configuration()
        configuration.heartbeatInterval = .milliseconds(150)
        configuration.heartbeatTimeout = .seconds(5)
        let transport = try await BLIPWebSocketClient.openTransport(
            to: "ws://127.0.0.1:\(server.port)/",
            configuration: configuration
        )
        let peer = try await server.accept()
        let connection = BLIPConnection(transport: transport)
        let running = Task { await connection.run() }
        // The peer sends a ping every 30 ms for about 1.2 s (eight heartbeat intervals), counting the pings it
        // gets; then closes.
        let pings = try await peer.executeThenClose { inbound, outbound -> Int in
            let counted = Task {
                var pings = 0
                for try await frame in inbound where frame.opcode == .ping { pings += 1 }
                return pings
            }
            for _ in 0..<40 {
                try await outbound.write(WebSocketFrame(fin: true, opcode: .ping, data: ByteBuffer(string: "alive")))
                try await Task.sleep(for: .milliseconds(30))
            }
            try await outbound.write(
                WebSocketFrame(fin: true, opcode: .connectionClose, data: ByteBuffer(bytes: [0x03, 0xE8]))
            )
            return try await counted.value
        }
        #expect(pings == 0, "the client pinged a peer it was hearing from: \(pings) pings")
        _ = await running.value
        await server.close()
    }

    @Test("a silent peer is found dead within the interval and the pong timeout (+1 s)")
    func deadPeerDetected() async throws {
        let server = try await RawWebSocketServer { $0.first }
        var configuration = BLIPWebSocketClient.Configuration()
        configuration.heartbeatInterval = .milliseconds(300)
        configuration.heartbeatTimeout = .milliseconds(300)
        let start = ContinuousClock.now
        let transport = try await BLIPWebSocketClient.openTransport(
            to: "ws://127.0.0.1:\(server.port)/",
            configuration: configuration
        )
        let peer = try await server.accept()
        let connection = BLIPConnection(transport: transport)
        let running = Task { await connection.run() }
        // The peer reads everything and answers nothing.
        let reader = Task {
            try await peer.executeThenClose { inbound, _ in for try await _ in inbound {} }
        }
        let status = await running.value
        let detected = ContinuousClock.now - start
        print("keepalive: a silent peer found dead after \(detected) (interval 0.3 s + timeout 0.3 s)")
        #expect(connection.closeStatus?.underlying.map { "\($0)" }?.contains("heartbeatTimedOut") == true, "\(status)")
        #expect(detected < .milliseconds(1_600))
        _ = try? await reader.value
        await server.close()
    }

    @Test("the server closes a connection idle for its idle timeout with 1001; a busy one stays")
    func idleTimeout() async throws {
        var configuration = BLIPWebSocketServer.Configuration.forTests
        configuration.idleTimeout = .milliseconds(300)
        try await withServer(configuration) { server in
            var client = BLIPWebSocketClient.Configuration()
            client.heartbeatInterval = .milliseconds(50)  // pings do not count as activity
            let start = ContinuousClock.now
            let error = await #expect(throws: BLIPConnectionError.self) {
                try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:\(server.port)/", configuration: client) {
                    connection in
                    _ = await connection.closed()
                }
            }
            #expect(error?.closeStatus?.code == .goingAway && error?.closeStatus?.reason == "idle")
            let idle = ContinuousClock.now - start
            #expect(idle >= .milliseconds(300) && idle < .seconds(10), "\(idle)")

            // Requests every 50 ms: still open after a second.
            try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:\(server.port)/") { connection in
                for _ in 0..<20 {
                    _ = try await connection.sendRequest(BLIPRequest(profile: "echo"))
                    try await Task.sleep(for: .milliseconds(50))
                }
                #expect(!connection.isClosed)
            }
        }
    }

    @Test("the server closes every connection at its maximum age with 1001, after what is in flight")
    func maximumAge() async throws {
        var configuration = BLIPWebSocketServer.Configuration.forTests
        configuration.maximumConnectionAge = .milliseconds(300)
        var router = standardRouter()
        router.register(profile: "slow") { _, _ in
            try await Task.sleep(for: .milliseconds(500))
            return BLIPResponse(text: "finished")
        }
        try await withServer(configuration, router: router) { server in
            let answered = NIOLockedValueBox<String?>(nil)
            let error = await #expect(throws: BLIPConnectionError.self) {
                try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:\(server.port)/") { connection in
                    // In flight when the age is reached: it is answered before the close.
                    let reply = try await connection.sendRequest(BLIPRequest(profile: "slow"))
                    answered.withLockedValue { $0 = String(buffer: reply.body) }
                    _ = await connection.closed()
                }
            }
            #expect(answered.withLockedValue { $0 } == "finished")
            #expect(error?.closeStatus?.code == .goingAway)
            #expect(error?.closeStatus?.reason == "maximum connection age")
        }
    }
}
