internal import ArgumentParser
internal import Foundation
internal import NIOCore
internal import NIOPosix

/// `blip`: a BLIP client, server, benchmark and frame dissector.
@main
struct BLIPTool: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "blip",
        abstract: "BLIP over WebSocket: serve, request, benchmark, decode frames, or watch a demo.",
        subcommands: [
            DemoCommand.self, ServeCommand.self, RequestCommand.self, BenchCommand.self, DecodeCommand.self,
            ProxyCommand.self,
            AutobahnClientCommand.self,
        ]
    )

    /// Runs Swift concurrency on NIO's event loops, so that a task resumed by a connection's event loop
    /// continues on that thread instead of waking another one (two thread switches per round trip saved).
    static func main() async {
        if ProcessInfo.processInfo.environment["BLIP_CONCURRENCY_ON_EVENT_LOOPS"] != "0" {
            NIOSingletons.unsafeTryInstallSingletonPosixEventLoopGroupAsConcurrencyGlobalExecutor()
        }
        await Self.main(nil)
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
