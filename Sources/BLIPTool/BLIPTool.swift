internal import ArgumentParser
internal import Foundation
internal import NIOCore
internal import NIOPosix

/// The process's entry point. It is synchronous so that the main thread's wait can be chosen: by default it
/// hands the thread to Dispatch (`dispatchMain()`, what an `async` main does); with
/// `BLIP_MAIN_THREAD_WAITS=1` it blocks on a semaphore instead. valgrind (3.19 and 3.24) stops with an
/// internal SIGSEGV in the signal thread `dispatchMain()` makes, so instruction counts under callgrind
/// (`blip bench --workload in-memory`, Docs/Benchmarks.md) need the second.
@main
enum BLIPMain {
    static func main() {
        let environment = ProcessInfo.processInfo.environment
        // Swift concurrency on NIO's event loops: a task resumed by a connection's event loop continues on
        // that thread instead of waking another one (two thread switches per round trip saved).
        if environment["BLIP_CONCURRENCY_ON_EVENT_LOOPS"] != "0" {
            NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
        }
        let waits = environment["BLIP_MAIN_THREAD_WAITS"] == "1"
        let finished = DispatchSemaphore(value: 0)
        Task.detached {
            await BLIPTool.parseAndRun()
            if waits { finished.signal() } else { exit(0) }
        }
        if waits {
            finished.wait()
            return
        }
        dispatchMain()
    }
}

/// `blip`: a BLIP client, server, benchmark and frame dissector.
struct BLIPTool: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "blip",
        abstract: "BLIP over WebSocket: serve, request, benchmark, decode frames, or watch a demo.",
        subcommands: [
            DemoCommand.self, ServeCommand.self, RequestCommand.self, SessionCommand.self, BenchCommand.self,
            DecodeCommand.self, ProxyCommand.self,
            AutobahnClientCommand.self,
        ]
    )

    /// What `AsyncParsableCommand.main()` does, without its hop to the main actor: a main thread that waits
    /// on a semaphore never serves that actor.
    static func parseAndRun() async {
        do {
            var command = try Self.parseAsRoot()
            if var command = command as? any AsyncParsableCommand {
                try await command.run()
            } else {
                try command.run()
            }
        } catch {
            Self.report(error)
        }
    }

    /// ArgumentParser's message for a usage error as one line: its first line, with a list of the values
    /// allowed (which it puts on lines of their own) folded in.
    static func usageLine(_ message: String) -> String {
        let lines = message.split(separator: "\n", omittingEmptySubsequences: false)
        guard let first = lines.first else { return message }
        let values = lines.dropFirst().prefix { $0.hasPrefix("  - ") }.map { $0.dropFirst(4) }
        guard !values.isEmpty else { return String(first) }
        let lead = first.replacingOccurrences(of: " Please provide one of the following:", with: "")
        return "\(lead) It takes one of: \(values.joined(separator: ", "))."
    }

    /// Ends the process for `error` (see ``ToolFailure``): help and the exit statuses commands choose go
    /// through ArgumentParser; a usage error is one line and 64; a failure at run time one line and 1.
    static func report(_ error: any Error) -> Never {
        let code = Self.exitCode(for: error)
        if error is ExitCode || code == .success { Self.exit(withError: error) }
        let isUsage = code == .validationFailure
        let message = isUsage ? Self.usageLine(Self.message(for: error)) : ToolFailure.describe(error)
        if !isUsage && CommandLine.arguments.contains("--json") {
            print(RequestCommand.jsonLine(["type": "failure", "error": message]))
        } else {
            FileHandle.standardError.write(Data("blip: \(message)\n".utf8))
        }
        Foundation.exit(isUsage ? ExitCode.validationFailure.rawValue : 1)
    }
}

/// Options every networking subcommand shares.
struct DialectOption: ExpressibleByArgument, Equatable {
    var isSeed: Bool

    init?(argument: String) {
        switch argument {
        case "seed": self.isSeed = true
        case "blip3", "blip2": self.isSeed = false  // chosen by the subprotocol
        default: return nil
        }
    }
}
