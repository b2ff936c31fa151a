import BLIP
import BLIPWebSocket
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOWebSocket
import Synchronization
import Testing

/// Keepalive as LiteCore does it: a ping only after an interval of silence, a pong deadline, and a dead peer
/// found within the interval and the deadline; on the server, an idle timeout and a maximum connection age,
/// both ending with 1001.
@Suite("Keepalive, idle connections and connection age", .timeLimit(.minutes(2)))
struct KeepaliveTests {
    /// Event loops of these tests' own, for both ends: what is timed here is the heartbeat's timers, which
    /// the other suites' floods and bulk transfers on the shared loops would delay by a second or more.
    static let clientLoops = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    static let peerLoops = MultiThreadedEventLoopGroup(numberOfThreads: 1)

    @Test("a peer that keeps sending is never pinged")
    func noPingWhileReceiving() async throws {
        let server = try await RawWebSocketServer(eventLoopGroup: Self.peerLoops) { $0.first }
        var configuration = BLIPWebSocketClient.Configuration()
        configuration.heartbeatInterval = .milliseconds(400)
        configuration.heartbeatTimeout = .seconds(5)
        let transport = try await BLIPWebSocketClient.openTransport(
            to: "ws://127.0.0.1:\(server.port)/",
            configuration: configuration,
            eventLoopGroup: Self.clientLoops
        )
        let peer = try await server.accept()
        let connection = BLIPConnection(transport: transport)
        let running = Task { await connection.run() }
        // The peer sends a ping every 30 ms for about 1.8 s (four heartbeat intervals), from its event loop
        // (a task would send late whenever this busy process's pool is behind: silence the client would
        // rightly ping); then closes.
        let channel = peer.channel
        let sent = NIOLockedValueBox(0)
        let pinging = channel.eventLoop.scheduleRepeatedTask(initialDelay: .zero, delay: .milliseconds(30)) { task in
            let count = sent.withLockedValue { sent in
                sent += 1
                return sent
            }
            if count <= 60 {
                channel.writeAndFlush(WebSocketFrame(fin: true, opcode: .ping, data: ByteBuffer(string: "alive")))
                    .whenComplete { _ in }
            } else {
                task.cancel()
                channel.writeAndFlush(
                    WebSocketFrame(fin: true, opcode: .connectionClose, data: ByteBuffer(bytes: [0x03, 0xE8]))
                ).whenComplete { _ in }
            }
        }
        try await peer.executeThenClose { inbound, _ in for try await _ in inbound {} }
        pinging.cancel()
        _ = await running.value
        let pings = server.timeline.withLockedValue { $0 }.filter { $0.kind == .received(.ping) }.count
        #expect(sent.withLockedValue { $0 } > 60, "the client closed before the peer was done")
        let timeline = server.timeline.withLockedValue { $0 }
        let origin = timeline.first?.time ?? .now()
        #expect(
            pings == 0,
            "the client pinged a peer it was hearing from: \(pings) pings; \(timeline.map { "\($0.kind) at \(($0.time - origin).nanoseconds / 1_000_000) ms" })"
        )
        await server.close()
    }

    @Test("a silent peer is found dead within the interval and the pong timeout (+1 s)")
    func deadPeerDetected() async throws {
        let server = try await RawWebSocketServer(eventLoopGroup: Self.peerLoops) { $0.first }
        var configuration = BLIPWebSocketClient.Configuration()
        configuration.heartbeatInterval = .milliseconds(300)
        configuration.heartbeatTimeout = .milliseconds(300)
        let transport = try await BLIPWebSocketClient.openTransport(
            to: "ws://127.0.0.1:\(server.port)/",
            configuration: configuration,
            eventLoopGroup: Self.clientLoops
        )
        let peer = try await server.accept()
        let connection = BLIPConnection(transport: transport)
        let running = Task { await connection.run() }
        // The peer reads everything and answers nothing.
        let reader = Task {
            try await peer.executeThenClose { inbound, _ in for try await _ in inbound {} }
        }
        let status = await running.value
        _ = try? await reader.value
        #expect(connection.closeStatus?.underlying.map { "\($0)" }?.contains("heartbeatTimedOut") == true, "\(status)")
        // Timed where it happened, on the peer's event loop: the ping after an interval of silence, then the
        // close within the pong timeout (+1 s). The heartbeat starts with the connection's run, after the
        // upgrade, so the ping comes an interval after the upgrade at the earliest.
        let timeline = server.timeline.withLockedValue { $0 }
        let upgraded = try #require(timeline.first { $0.kind == .upgraded }).time
        let ping = try #require(timeline.first { $0.kind == .received(.ping) }, "no ping: \(timeline)").time
        let closed = try #require(
            timeline.first { $0.kind == .received(.connectionClose) || $0.kind == .closed }
        ).time
        print(
            "keepalive: a silent peer pinged \(ping - upgraded) after the upgrade, found dead \(closed - ping)"
                + " after the ping (interval 0.3 s, timeout 0.3 s)"
        )
        #expect(ping - upgraded >= .milliseconds(300))
        // (No lower bound here: the ping may reach the peer late, the close on time.)
        #expect(closed - ping < .milliseconds(1_300))
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
            // The server's idle check runs on the shared pool, where a busy machine can only make it later:
            // the upper bound catches a connection never closed.
            #expect(idle >= .milliseconds(300) && idle < .seconds(30), "\(idle)")

            // A request every 50 ms, queued from the connection's own event loop without waiting for replies
            // (so that neither a pause of this process's pool nor a slow server makes the client fall
            // silent): still open after a second.
            let loop = Self.clientLoops.any()
            try await BLIPWebSocketClient.connect(
                to: "ws://127.0.0.1:\(server.port)/",
                eventLoopGroup: Self.clientLoops
            ) { connection in
                let queued = try await withTaskExecutorPreference(connection.taskExecutor) {
                    var queued: [BLIPQueuedRequest] = []
                    for _ in 0..<20 {
                        queued.append(connection.enqueueRequest(BLIPRequest(profile: "echo")))
                        try await loop.scheduleTask(in: .milliseconds(50)) {}.futureResult.get()
                    }
                    return queued
                }
                #expect(!connection.isClosed)
                for request in queued { _ = try await request.reply() }
            }
        }
    }

    @Test("the server closes every connection at its maximum age with 1001, after what is in flight")
    func maximumAge() async throws {
        var configuration = BLIPWebSocketServer.Configuration.forTests
        configuration.maximumConnectionAge = .seconds(1)
        var router = standardRouter()
        router.register(profile: "slow") { _, _ in
            try await Task.sleep(for: .milliseconds(1_500))
            return BLIPResponse(text: "finished")
        }
        try await withServer(configuration, router: router) { server in
            let answered = NIOLockedValueBox<String?>(nil)
            let error = await #expect(throws: BLIPConnectionError.self) {
                try await BLIPWebSocketClient.connect(
                    to: "ws://127.0.0.1:\(server.port)/",
                    eventLoopGroup: Self.clientLoops
                ) { connection in
                    // In flight when the age is reached: it is answered before the close. Sent from the
                    // connection's event loop, so that it leaves well before the age however busy the pool is.
                    let reply = try await withTaskExecutorPreference(connection.taskExecutor) {
                        try await connection.sendRequest(BLIPRequest(profile: "slow"))
                    }
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
