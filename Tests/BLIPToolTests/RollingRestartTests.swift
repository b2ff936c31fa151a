import BLIPTestSupport
import Foundation
import NIOCore
import NIOPosix
import Testing

/// The scale-out story: HAProxy (TCP mode) in front of three `blip serve` processes, twenty `blip session`s
/// sending a steady stream of requests through it, and the servers restarted one at a time with SIGTERM (a
/// graceful 1001). Every session comes back on a live server; every request is replied or fails once as
/// transient; no session stops.
@Suite(
    "A rolling restart behind HAProxy",
    .timeLimit(.minutes(4)),
    .enabled(if: HAProxy.unavailable == nil, Comment(rawValue: HAProxy.unavailable ?? ""))
)
struct RollingRestartTests {
    static let sessions = 20

    @Test("three servers restarted in turn under twenty sessions")
    func rollingRestart() async throws {
        let blip = try #require(ServerProcess.executable)
        // Every port is held for the whole test: a server restarted on its port, or HAProxy, finds it free,
        // and no other suite's server can take it while one of ours is down.
        let reservations = try (0..<4).map { _ in try LoopbackPortReservation() }
        defer { withExtendedLifetime(reservations) {} }
        let ports = reservations.prefix(3).map(\.port)
        let front = reservations[3].port
        var servers: [ServerProcess] = []
        for port in ports {
            servers.append(try await ServerProcess.start(blip, command: ["serve", "--port", "\(port)"]))
        }
        let configuration = FileManager.default.temporaryDirectory.appendingPathComponent("blip-haproxy-\(UUID()).cfg")
        try Self.configuration(front: front, backends: ports).write(
            to: configuration,
            atomically: true,
            encoding: .utf8
        )
        defer { try? FileManager.default.removeItem(at: configuration) }
        let balancer = try Self.spawn(HAProxy.path, ["-f", configuration.path, "-db"])
        try await Self.waitUntilListening(port: front)

        let clients = try (0..<Self.sessions).map { _ in
            try Self.spawn(
                blip.path,
                [
                    "session", "ws://127.0.0.1:\(front)/", "--interval", "50", "--timeout", "10", "--max-delay", "500",
                    "--heartbeat", "1", "--connect-timeout", "2", "--json",
                ],
                captureOutput: true
            )
        }
        try await Task.sleep(for: .seconds(2))
        // One server at a time: SIGTERM (it drains and closes every connection with 1001), then a new
        // process on the same port, then a pause before the next.
        for index in servers.indices {
            _ = await servers[index].stopped()
            servers[index] = try await ServerProcess.start(blip, command: ["serve", "--port", "\(ports[index])"])
            try await Task.sleep(for: .seconds(1.5))
        }
        try await Task.sleep(for: .seconds(1))
        var summaries: [[String: Any]] = []
        for (process, output) in clients {
            let (status, text) = try await Self.finish(process, output: output)
            let line = text.split(separator: "\n").last { $0.contains("\"requests\"") }
            let summary = line.flatMap { try? JSONSerialization.jsonObject(with: Data($0.utf8)) as? [String: Any] }
            #expect(status == 0, "a session failed: \(text.suffix(600))")
            summaries.append(summary ?? [:])
        }
        for server in servers { _ = await server.stopped() }
        _ = try await Self.finish(balancer.0, output: balancer.1)

        let requests = summaries.reduce(0) { $0 + ($1["requests"] as? Int ?? 0) }
        let replied = summaries.reduce(0) { $0 + ($1["replied"] as? Int ?? 0) }
        let transient = summaries.reduce(0) { $0 + ($1["failed_transient"] as? Int ?? 0) }
        let permanent = summaries.reduce(0) { $0 + ($1["failed_permanent"] as? Int ?? 0) }
        let reconnects = summaries.map { $0["reconnects"] as? Int ?? 0 }
        let gaps = summaries.map { $0["max_gap_ms"] as? Int ?? .max }.sorted()
        print(
            """
            rolling restart: \(Self.sessions) sessions, 3 restarts: \(requests) requests, \(replied) replied, \
            \(transient) failed as transient (\(Double(transient) / 3) per restart), \(permanent) permanent; \
            reconnections per session \(reconnects.min() ?? 0)-\(reconnects.max() ?? 0); longest gap per session: \
            p50 \(gaps[gaps.count / 2]) ms, p99 \(gaps[min(gaps.count - 1, gaps.count * 99 / 100)]) ms
            """
        )
        #expect(summaries.count == Self.sessions)
        #expect(requests > 0 && replied + transient == requests && permanent == 0)
        #expect(reconnects.allSatisfy { $0 >= 1 }, "every session's server was restarted once at least: \(reconnects)")
    }

    static func configuration(front: Int, backends: [Int]) -> String {
        var text = """
            global
                maxconn 2000
            defaults
                mode tcp
                timeout connect 2s
                timeout client 120s
                timeout server 120s
            frontend blip
                bind 127.0.0.1:\(front)
                default_backend servers
            backend servers
                balance roundrobin
                default-server inter 200ms fall 1 rise 1

            """
        for (index, port) in backends.enumerated() { text += "    server s\(index) 127.0.0.1:\(port) check\n" }
        return text
    }

    static func waitUntilListening(port: Int) async throws {
        for _ in 0..<500 {
            if (try? await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
                .connect(host: "127.0.0.1", port: port).get().close().get()) != nil
            {
                return
            }
            try await Task.sleep(for: .milliseconds(10))
        }
        Issue.record("nothing listens on \(port)")
    }

    /// Starts `executable`, its output to a file.
    static func spawn(_ executable: String, _ arguments: [String], captureOutput: Bool = false) throws -> (Process, URL)
    {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: executable)
        process.arguments = arguments
        var environment = ProcessInfo.processInfo.environment
        environment["LLVM_PROFILE_FILE"] = "/dev/null"
        process.environment = environment
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("blip-rolling-\(UUID().uuidString).log")
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        let handle = try FileHandle(forWritingTo: log)
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        return (process, log)
    }

    /// Stops a process with SIGTERM (SIGKILL after 20 s), off the cooperative pool; its status and output.
    static func finish(_ process: Process, output: URL) async throws -> (Int32, String) {
        try await offThePool {
            if process.isRunning { process.terminate() }
            let killer = DispatchWorkItem { kill(process.processIdentifier, SIGKILL) }
            DispatchQueue.global().asyncAfter(deadline: .now() + 20, execute: killer)
            process.waitUntilExit()
            killer.cancel()
            defer { try? FileManager.default.removeItem(at: output) }
            return (process.terminationStatus, (try? String(contentsOf: output, encoding: .utf8)) ?? "")
        }
    }
}

/// Where HAProxy is, and why the test cannot run when it cannot.
enum HAProxy {
    static let path = "/usr/sbin/haproxy"
    static let unavailable: String? = {
        if !FileManager.default.isExecutableFile(atPath: Self.path) {
            return "HAProxy is not installed (.ci/setup.sh installs the haproxy package)"
        }
        if ServerProcess.executable == nil { return "the blip executable was not built beside the tests" }
        return nil
    }()
}
