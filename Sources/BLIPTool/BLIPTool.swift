internal import ArgumentParser

/// `blip`: a BLIP client, server, benchmark and frame dissector.
@main
struct BLIPTool: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "blip",
        abstract: "BLIP over WebSocket: serve, request, benchmark, decode frames, or watch a demo.",
        subcommands: [
            DemoCommand.self, ServeCommand.self, RequestCommand.self, BenchCommand.self, DecodeCommand.self,
            AutobahnClientCommand.self,
        ]
    )
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
