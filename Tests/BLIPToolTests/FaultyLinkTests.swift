import BLIPTestSupport
import Foundation
import Testing

/// `blip session` over a real link that fails as networks do, between two network namespaces: loss with a
/// long round trip, an outage, a blackhole, a server that dies. The session finishes its work; every request
/// is replied or fails once as transient; a dead peer is found by the keepalive.
@Suite(
    "Sessions over faulty links (network namespaces, nftables)",
    .serialized,
    .timeLimit(.minutes(4)),
    .enabled(if: FaultyLink.unavailable == nil, Comment(rawValue: FaultyLink.unavailable ?? ""))
)
struct FaultyLinkTests {
    static let repository = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()

    init() {
        if let reason = FaultyLink.unavailable { print("faulty-link tests skipped: \(reason)") }
    }

    /// A `blip serve` in the link's server namespace, on `host`; returns once it listens.
    static func startServer(_ link: FaultyLink, host: String, port: Int = 4985) async throws -> (Process, URL) {
        let blip = try #require(ServerProcess.executable)
        let (process, log) = try link.start(
            in: link.serverNamespace,
            [blip.path, "serve", "--host", host, "--port", "\(port)"]
        )
        for _ in 0..<500 where !Self.read(log).contains("listening") { try await Task.sleep(for: .milliseconds(10)) }
        #expect(Self.read(log).contains("listening"), "blip serve did not start: \(Self.read(log))")
        return (process, log)
    }

    /// Runs `blip session` in the client namespace with `arguments`; returns its exit status, its JSON events
    /// and its summary, once it ends (at most `limit`).
    static func session(
        _ link: FaultyLink,
        _ arguments: [String],
        limit: Duration = .seconds(150),
        during: @Sendable () async throws -> Void = {}
    ) async throws -> (status: Int32, events: [[String: Any]], summary: [String: Any]) {
        let blip = try #require(ServerProcess.executable)
        let (process, log) = try link.start(in: link.clientNamespace, [blip.path, "session"] + arguments + ["--json"])
        // `during`'s faults are timed from the session's first connection, not from its launch: on a busy
        // machine the tool can take over a second to start, and a fault before it connects tests nothing.
        for _ in 0..<1_500
        where process.isRunning && !Self.events(in: log).contains(where: { $0["event"] as? String == "connected" }) {
            try await Task.sleep(for: .milliseconds(20))
        }
        try await during()
        let deadline = ContinuousClock.now + limit
        while process.isRunning && ContinuousClock.now < deadline { try await Task.sleep(for: .milliseconds(20)) }
        await Self.stop(process, signal: SIGTERM)  // blip session handles SIGTERM: it stops and summarizes
        let lines = Self.events(in: log)
        let summary = try #require(lines.last { $0["requests"] != nil }, "no summary: \(Self.read(log))")
        return (process.terminationStatus, lines.filter { $0["event"] != nil }, summary)
    }

    static func read(_ log: URL) -> String { (try? String(contentsOf: log, encoding: .utf8)) ?? "" }

    /// The JSON lines `blip session --json` wrote so far: its events, and its summary last.
    static func events(in log: URL) -> [[String: Any]] {
        Self.read(log).split(separator: "\n").compactMap {
            try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any]
        }
    }

    /// Stops `process` with `signal` and waits for it, on a Dispatch thread (a wait on the cooperative pool
    /// would hold one of its two threads). SIGKILL for what does not handle SIGTERM: a child inherits this
    /// process's ignored signals, and the tool's in-process commands ignore SIGTERM to handle it themselves.
    static func stop(_ process: Process, signal: Int32 = SIGKILL) async {
        _ = try? await offThePool {
            if process.isRunning { kill(process.processIdentifier, signal) }
            process.waitUntilExit()
        }
    }

    @Test("5 % loss each way and 50 ms more round trip: 1 000 ordered requests (32 in flight), then 16 MiB")
    func lossAndDelay() async throws {
        let link = try await offThePool { try FaultyLink() }
        defer { link.remove() }
        let (server, _) = try await Self.startServer(link, host: "127.0.0.1")
        // 25 ms each way, in the server's namespace, between the link and the server.
        let relayScript = Self.repository.appendingPathComponent("Tests/Support/delay_relay.py").path
        let (relay, relayLog) = try link.start(
            in: link.serverNamespace,
            ["python3", relayScript, link.serverAddress, "4986", "127.0.0.1", "4985", "25"]
        )
        for _ in 0..<500 where !Self.read(relayLog).contains("listening") {
            try await Task.sleep(for: .milliseconds(10))
        }
        try await offThePool { try link.loss(percent: 5) }
        let start = ContinuousClock.now
        let run = try await Self.session(
            link,
            [
                "ws://\(link.serverAddress):4986/", "--count", "1000", "--in-flight", "32", "--bulk", "\(16 << 20)",
                "--timeout", "60", "--max-delay", "500", "--heartbeat", "5",
            ]
        )
        print("faulty link, 5 % loss + 50 ms: \(run.summary) in \(ContinuousClock.now - start)")
        #expect(run.status == 0, "\(run.summary)")
        let replied = run.summary["replied"] as? Int ?? 0
        let transient = run.summary["failed_transient"] as? Int ?? 0
        #expect(run.summary["requests"] as? Int == 1_000 && replied + transient == 1_000, "\(run.summary)")
        #expect(run.summary["bulk_done"] as? Bool == true)
        await Self.stop(relay)
        await Self.stop(server, signal: SIGTERM)
    }

    @Test("the link down for 3 s mid-session, then up: every request replied or failed as transient")
    func outage() async throws {
        let link = try await offThePool { try FaultyLink() }
        defer { link.remove() }
        let (server, _) = try await Self.startServer(link, host: link.serverAddress)
        let run = try await Self.session(
            link,
            [
                "ws://\(link.serverAddress):4985/", "--count", "300", "--interval", "20", "--timeout", "15",
                "--heartbeat", "1", "--connect-timeout", "2", "--max-delay", "500",
            ]
        ) {
            try await Task.sleep(for: .seconds(1))
            try await offThePool { try link.setLink(up: false) }
            try await Task.sleep(for: .seconds(3))
            try await offThePool { try link.setLink(up: true) }
        }
        await Self.stop(server, signal: SIGTERM)
        print("faulty link, 3 s outage: \(run.summary)")
        #expect(run.status == 0, "\(run.summary)")
        let replied = run.summary["replied"] as? Int ?? 0
        let transient = run.summary["failed_transient"] as? Int ?? 0
        #expect(run.summary["requests"] as? Int == 300 && replied + transient == 300, "\(run.summary)")
    }

    @Test("a blackhole: the dead peer is found within the keepalive bound; the session comes back after it")
    func blackhole() async throws {
        let link = try await offThePool { try FaultyLink() }
        defer { link.remove() }
        let (server, _) = try await Self.startServer(link, host: link.serverAddress)
        let holed = SendableBox<Double>(0)
        let run = try await Self.session(
            link,
            [
                "ws://\(link.serverAddress):4985/", "--count", "80", "--interval", "100", "--timeout", "3",
                "--heartbeat", "1", "--connect-timeout", "1", "--max-delay", "300",
            ]
        ) {
            try await Task.sleep(for: .seconds(1.5))
            holed.value = Date().timeIntervalSince1970
            try await offThePool { try link.blackhole() }
            try await Task.sleep(for: .seconds(4))
            try await offThePool { try link.heal() }
        }
        await Self.stop(server, signal: SIGTERM)
        let closed = run.events.first { $0["event"] as? String == "closed" }
        let detected = (closed?["time"] as? Double ?? .infinity) - holed.value
        print(
            "faulty link, blackhole: dead peer found after \(detected) s (heartbeat 1 s, pong timeout 1 s); \(run.summary)"
        )
        #expect(detected < 3.5, "found after \(detected) s; bound: 1 s interval + 1 s timeout + 1 s")
        #expect(run.status == 0, "\(run.summary)")
        #expect((run.summary["reconnects"] as? Int ?? 0) >= 1, "\(run.summary)")
    }

    @Test("the server killed (SIGKILL) and started again: the session reconnects within its backoff")
    func serverKilled() async throws {
        let link = try await offThePool { try FaultyLink() }
        defer { link.remove() }
        let (server, _) = try await Self.startServer(link, host: link.serverAddress)
        let restarted = SendableBox<Process?>(nil)
        let run = try await Self.session(
            link,
            [
                "ws://\(link.serverAddress):4985/", "--count", "60", "--interval", "50", "--timeout", "5",
                "--heartbeat", "1", "--connect-timeout", "2", "--max-delay", "300",
            ]
        ) {
            try await Task.sleep(for: .seconds(1))
            await Self.stop(server)  // SIGKILL: no close frame, the socket just goes
            restarted.value = try await Self.startServer(link, host: link.serverAddress).0
        }
        if let process = restarted.value { await Self.stop(process, signal: SIGTERM) }
        print("faulty link, server killed: \(run.summary)")
        #expect(run.status == 0, "\(run.summary)")
        #expect((run.summary["reconnects"] as? Int ?? 0) >= 1, "\(run.summary)")
        #expect((run.summary["max_gap_ms"] as? Int ?? .max) < 3_000, "\(run.summary)")
    }
}

/// A value shared with a `during` closure. Unchecked: written by one task and read after it ends.
final class SendableBox<Value>: @unchecked Sendable {
    var value: Value
    init(_ value: Value) { self.value = value }
}
