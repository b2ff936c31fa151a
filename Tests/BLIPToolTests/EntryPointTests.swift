import Foundation
import Testing

/// The built `blip`'s entry point, in both of its main-thread modes: handed to Dispatch (the default), and
/// blocked on a semaphore (`BLIP_MAIN_THREAD_WAITS=1`, for valgrind). A command that waited for the main
/// actor in the second mode would never run: these runs are bounded.
@Suite("The blip process's entry point")
struct EntryPointTests {
    struct Run {
        var status: Int32
        var output: String
    }

    /// Runs the built `blip` with `arguments`; nil when it did not end within `limit` (it is then killed).
    static func run(_ arguments: [String], waits: Bool, limit: TimeInterval = 120) async throws -> Run? {
        let executable = try #require(ServerProcess.executable, "the blip executable was not built")
        return try await withCheckedThrowingContinuation { continuation in
            DispatchQueue.global().async {
                let process = Process()
                process.executableURL = executable
                process.arguments = arguments
                var environment = ProcessInfo.processInfo.environment
                environment["LLVM_PROFILE_FILE"] = "/dev/null"
                environment["BLIP_MAIN_THREAD_WAITS"] = waits ? "1" : "0"
                process.environment = environment
                let output = Pipe()
                process.standardOutput = output
                process.standardError = output
                do {
                    try process.run()
                } catch {
                    return continuation.resume(throwing: error)
                }
                let pid = process.processIdentifier
                let killer = DispatchWorkItem { kill(pid, SIGKILL) }
                DispatchQueue.global().asyncAfter(deadline: .now() + limit, execute: killer)
                // Read while it runs, so that a full pipe cannot stall it; the end comes when it exits.
                let text = output.fileHandleForReading.readDataToEndOfFile()
                process.waitUntilExit()
                killer.cancel()
                if process.terminationReason == .uncaughtSignal && process.terminationStatus == SIGKILL {
                    return continuation.resume(returning: nil)
                }
                continuation.resume(
                    returning: Run(status: process.terminationStatus, output: String(decoding: text, as: UTF8.self))
                )
            }
        }
    }

    @Test(
        "a command runs to its end and its exit status is kept, with the main thread waiting or not",
        arguments: [false, true]
    )
    func modes(waits: Bool) async throws {
        let bench = try #require(
            try await Self.run(["bench", "--workload", "in-memory", "--count", "20"], waits: waits),
            "blip bench did not end within 120 s"
        )
        #expect(bench.status == 0, "\(bench.output)")
        #expect(bench.output.contains("in-memory-rt"), "\(bench.output)")
        let refused = try #require(try await Self.run(["no-such-command"], waits: waits), "blip did not end")
        #expect(refused.status == 64, "\(refused.output)")
        #expect(refused.output.contains("no-such-command"), "\(refused.output)")
    }
}
