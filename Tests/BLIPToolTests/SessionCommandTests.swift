import BLIPTestSupport
import Foundation
import Testing

/// `blip session`: a reconnecting session from the command line, with a summary a script can read.
@Suite("blip session", .timeLimit(.minutes(3)))
struct SessionCommandTests {
    /// The summary line of a `--json` run's output.
    static func summary(_ output: String) throws -> [String: Any] {
        let line = try #require(output.split(separator: "\n").last { $0.contains("\"requests\"") }, "\(output)")
        return try #require(try JSONSerialization.jsonObject(with: Data(line.utf8)) as? [String: Any])
    }

    @Test("it rides out a server restart: every request is replied or failed as transient, exit 0")
    func serverRestart() async throws {
        let executable = try #require(
            ServerProcess.executable,
            "build the blip product first (swift build --build-tests)"
        )
        // The port is held for the whole test, so that no other suite's server takes it while ours restarts.
        let reservation = try LoopbackPortReservation()
        defer { withExtendedLifetime(reservation) {} }
        let port = reservation.port
        let first = try await ServerProcess.start(executable, command: ["serve", "--port", "\(port)"])
        defer { _ = first.stop() }
        // The session writes to a file, read while it runs: the server is restarted once the session is
        // connected to it and has been sending for a moment, however late a busy machine starts it.
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("blip-session-\(UUID().uuidString).log")
        defer { try? FileManager.default.removeItem(at: log) }
        let process = try Self.startSession(
            executable,
            [
                "session", "ws://127.0.0.1:\(port)/", "--count", "300", "--interval", "25", "--max-delay", "300",
                "--json",
            ],
            output: log
        )
        defer { if process.isRunning { kill(process.processIdentifier, SIGKILL) } }
        let session = Task {
            try await offThePool { () -> EntryPointTests.Run? in
                let killer = DispatchWorkItem { kill(process.processIdentifier, SIGKILL) }
                DispatchQueue.global().asyncAfter(deadline: .now() + 120, execute: killer)
                process.waitUntilExit()
                killer.cancel()
                if process.terminationReason == .uncaughtSignal { return nil }
                let output = (try? String(contentsOf: log, encoding: .utf8)) ?? ""
                return EntryPointTests.Run(status: process.terminationStatus, output: output)
            }
        }
        for _ in 0..<600 where !Self.read(log).contains("\"event\":\"connected\"") {
            try await Task.sleep(for: .milliseconds(50))
        }
        try #require(Self.read(log).contains("\"event\":\"connected\""), "never connected: \(Self.read(log))")
        try await Task.sleep(for: .milliseconds(300))
        _ = await first.stopped()  // SIGTERM: a graceful close with 1001
        let second = try await ServerProcess.start(executable, command: ["serve", "--port", "\(port)"])
        defer { _ = second.stop() }
        let run = try #require(try await session.value, "blip session did not end")
        let summary = try Self.summary(run.output)
        #expect(run.status == 0, "\(run.output)")
        #expect(summary["requests"] as? Int == 300)
        let replied = summary["replied"] as? Int ?? 0
        let transient = summary["failed_transient"] as? Int ?? 0
        #expect(replied + transient == 300 && summary["failed_permanent"] as? Int == 0, "\(summary)")
        #expect((summary["reconnects"] as? Int ?? 0) >= 1, "\(summary)")
        #expect(run.output.contains("\"event\":\"waiting\""), "state changes are printed")
        _ = await second.stopped()
    }

    @Test("refused credentials end it as a permanent failure: exit 1")
    func refused() async throws {
        let executable = try #require(
            ServerProcess.executable,
            "build the blip product first (swift build --build-tests)"
        )
        let server = try await ServerProcess.start(executable, arguments: ["--require-basic", "alice:pw"])
        defer { _ = server.stop() }
        let run = try #require(
            try await EntryPointTests.run(
                ["session", "ws://127.0.0.1:\(server.port)/", "--count", "5", "--json"],
                waits: false
            )
        )
        #expect(run.status == 1, "\(run.output)")
        let summary = try Self.summary(run.output)
        #expect((summary["ending"] as? String)?.hasPrefix("permanent failure") == true, "\(summary)")
        _ = await server.stopped()
    }

    static func read(_ log: URL) -> String { (try? String(contentsOf: log, encoding: .utf8)) ?? "" }

    /// Starts the built `blip` with `arguments`, its output (both streams) going to `output`.
    static func startSession(_ executable: URL, _ arguments: [String], output: URL) throws -> Process {
        _ = FileManager.default.createFile(atPath: output.path, contents: nil)
        let handle = try FileHandle(forWritingTo: output)
        let process = Process()
        process.executableURL = executable
        process.arguments = arguments
        var environment = ProcessInfo.processInfo.environment
        environment["LLVM_PROFILE_FILE"] = "/dev/null"
        process.environment = environment
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        return process
    }
}
