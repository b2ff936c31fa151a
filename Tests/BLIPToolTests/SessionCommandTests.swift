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
        let first = try await ServerProcess.start(executable)
        let port = first.port
        let session = Task {
            try await EntryPointTests.run(
                [
                    "session", "ws://127.0.0.1:\(port)/", "--count", "40", "--interval", "50", "--max-delay", "300",
                    "--json",
                ],
                waits: false
            )
        }
        try await Task.sleep(for: .milliseconds(700))
        _ = await first.stopped()  // SIGTERM: a graceful close with 1001
        let second = try await ServerProcess.start(executable, command: ["serve", "--port", "\(port)"])
        defer { _ = second.stop() }
        let run = try #require(try await session.value, "blip session did not end")
        let summary = try Self.summary(run.output)
        #expect(run.status == 0, "\(run.output)")
        #expect(summary["requests"] as? Int == 40)
        let replied = summary["replied"] as? Int ?? 0
        let transient = summary["failed_transient"] as? Int ?? 0
        #expect(replied + transient == 40 && summary["failed_permanent"] as? Int == 0, "\(summary)")
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
}
