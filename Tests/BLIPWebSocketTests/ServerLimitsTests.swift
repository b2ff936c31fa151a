import BLIP
import BLIPTestSupport
import NIOCore
import NIOPosix
import Testing

@testable import BLIPWebSocket

/// What the server does with clients that never finish (or botch) their upgrade, and with more clients than
/// it is configured for, seen from raw TCP clients over loopback.
@Suite("Server limits over loopback", .timeLimit(.minutes(3)))
struct ServerLimitsTests {
    /// The server and its clients run on a loop of their own: on the shared loops, the other suites'
    /// transfers delayed a loopback connect past NIO's 10 s timeout on a busy machine, and a handshake
    /// timer fired late.
    static let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)

    static let upgradeRequest =
        "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        + "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: BLIP_3+CBMobile_3\r\n"
    static let key = "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"

    @Test(
        "a client that sends nothing, or one byte at a time, is closed at the handshake timeout",
        arguments: [false, true]
    )
    func handshakeTimeout(trickles: Bool) async throws {
        #expect(BLIPWebSocketServer.Configuration().handshakeTimeout == .seconds(10))
        var configuration = BLIPWebSocketServer.Configuration.forTests
        configuration.handshakeTimeout = .milliseconds(500)
        try await withServer(configuration, eventLoopGroup: Self.group) { server in
            let client = try await RawTCPClient.connect(port: server.port, group: Self.group)
            // At most 200 bytes of a request head that never ends, one every 50 ms (10 s).
            let trickle = Task {
                guard trickles else { return }
                for byte in Array((Self.upgradeRequest + "X-Slow: " + String(repeating: "a", count: 200)).utf8)
                    .prefix(200)
                {
                    guard (try? await client.send([byte])) != nil else { return }
                    try? await Task.sleep(for: .milliseconds(50))
                }
            }
            let closed = await client.serverClose(within: .seconds(20))
            trickle.cancel()
            let close = try #require(closed, "the connection was still open after 20 s (timeout 0.5 s)")
            #expect(close.after >= .milliseconds(450) && close.after < .seconds(15), "closed after \(close.after)")
            #expect(close.bytes.isEmpty, "no answer, just the close")
        }
    }

    @Test("an upgraded connection outlives the handshake timeout")
    func upgradedConnectionStays() async throws {
        var configuration = BLIPWebSocketServer.Configuration.forTests
        // Wide enough for the upgrade itself on a busy machine.
        configuration.handshakeTimeout = .seconds(2)
        try await withServer(configuration, eventLoopGroup: Self.group) { server in
            var client = BLIPWebSocketClient.Configuration()
            client.heartbeatInterval = nil
            let connecting = ContinuousClock.now
            try await BLIPWebSocketClient.connect(
                to: "ws://127.0.0.1:\(server.port)/",
                configuration: client,
                eventLoopGroup: Self.group
            ) {
                connection in
                _ = try await connection.sendRequest(BLIPRequest(profile: "echo"))
                // Time must pass beyond the timeout for a timer left armed to fire.
                try await Task.sleep(until: connecting + .milliseconds(2500))
                let reply = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "still here"))
                #expect(String(buffer: reply.body) == "still here")
            }
        }
    }

    @Test("a request head over the size limit gets 400 and the connection closes; one under it is served")
    func requestHeadLimit() async throws {
        #expect(BLIPWebSocketServer.Configuration().maximumRequestHeadSize == 16 * 1024)
        try await withServer(eventLoopGroup: Self.group) { server in
            for size in [1 << 20, 17 * 1024] {
                let client = try await RawTCPClient.connect(port: server.port, group: Self.group)
                let request = Self.upgradeRequest + Self.key + "X-Big: \(String(repeating: "a", count: size))\r\n\r\n"
                try? await client.send(Array(request.utf8))  // the server may close before taking all of it
                let close = try #require(await client.serverClose(within: .seconds(20)), "\(size): still open")
                #expect(close.statusLine == "HTTP/1.1 400 Bad Request", "\(size)")
            }
            var client = BLIPWebSocketClient.Configuration()
            client.headers = ["Cookie": String(repeating: "c", count: 12 * 1024)]
            try await BLIPWebSocketClient.connect(
                to: "ws://127.0.0.1:\(server.port)/",
                configuration: client,
                eventLoopGroup: Self.group
            ) {
                connection in
                _ = try await connection.sendRequest(BLIPRequest(profile: "echo"))
            }
        }
    }

    @Test("an upgrade request without Sec-WebSocket-Key gets 400 (RFC 6455 4.2.1); plain HTTP still gets 426")
    func missingKey() async throws {
        try await withServer(eventLoopGroup: Self.group) { server in
            let client = try await RawTCPClient.connect(port: server.port, group: Self.group)
            try await client.send(Array((Self.upgradeRequest + "\r\n").utf8))
            let close = try #require(await client.serverClose(within: .seconds(20)))
            #expect(close.statusLine == "HTTP/1.1 400 Bad Request")
            #expect(String(decoding: close.bytes, as: UTF8.self).contains("Sec-WebSocket-Key"))

            let plain = try await RawTCPClient.connect(port: server.port, group: Self.group)
            try await plain.send(Array("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".utf8))
            let answer = try #require(await plain.serverClose(within: .seconds(20)))
            #expect(answer.statusLine == "HTTP/1.1 426 Upgrade Required")
        }
    }

    @Test("connections over maximumConnections are closed at once, idle ones in their handshake included")
    func maximumConnections() async throws {
        var configuration = BLIPWebSocketServer.Configuration.forTests
        configuration.maximumConnections = 3
        configuration.handshakeTimeout = .seconds(60)
        try await withServer(configuration, eventLoopGroup: Self.group) { server in
            var idle: [RawTCPClient] = []
            for _ in 0..<3 { idle.append(try await RawTCPClient.connect(port: server.port, group: Self.group)) }
            let extra = try await RawTCPClient.connect(port: server.port, group: Self.group)
            let close = try #require(
                await extra.serverClose(within: .seconds(20)),
                "a fourth connection was still open after 20 s"
            )
            #expect(close.bytes.isEmpty && close.after < .seconds(15), "closed after \(close.after)")
            for client in idle { await client.close() }
            // The server notices the closes on its own time: a few refusals may come first.
            var served = false
            for _ in 0..<100 where !served {
                served =
                    (try? await BLIPWebSocketClient.connect(
                        to: "ws://127.0.0.1:\(server.port)/",
                        eventLoopGroup: Self.group
                    ) { connection in
                        _ = try await connection.sendRequest(BLIPRequest(profile: "echo"))
                    }) != nil
            }
            #expect(served)
        }
    }
}

@Suite("Rate-limited warnings")
struct LogRateLimiterTests {
    @Test("the first occurrence is logged at once, then one line per interval counting what it covers")
    func counts() {
        var limiter = LogRateLimiter(interval: .seconds(10))
        let start = NIODeadline.now()
        #expect(limiter.record(now: start) == 1)
        #expect(limiter.record(now: start + .seconds(1)) == nil)
        #expect(limiter.record(now: start + .seconds(9)) == nil)
        #expect(limiter.record(now: start + .seconds(10)) == 3)
        #expect(limiter.record(now: start + .seconds(11)) == nil)
        #expect(limiter.record(now: start + .seconds(30)) == 2)
    }
}
