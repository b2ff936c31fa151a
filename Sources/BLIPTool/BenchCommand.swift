internal import ArgumentParser
internal import BLIP
internal import BLIPWebSocket
internal import Foundation
internal import Logging
internal import NIOCore
internal import Synchronization

struct BenchCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "bench",
        abstract:
            "Run the standard benchmark workloads (Docs/Benchmarks.md) against a server with the standard profiles.",
        discussion: """
            rt: sequential 100-byte echo requests. pipelined: the same with C outstanding (16 and 64 by \
            default). bulk: one 64 MiB message (after an untimed 8 MiB one), up to `sink` or down from \
            `source`. urgent: 100 small requests while 64 MiB streams. --baseline also runs the rt, \
            pipelined and bulk shapes as raw WebSocket messages over the same transport and prints each BLIP \
            figure as a ratio to it; for rt and pipelined, in two shapes: a task awaiting each echo, and \
            echoes driven from the event loop (the handler baseline). --via runs rt, pipelined and bulk also \
            through a relay in front of the same server (`blip proxy`), the two routes taking turns for \
            --rounds rounds, and prints each route's median round, the relay's as a ratio to direct's.
            """
    )

    enum Workload: String, ExpressibleByArgument, CaseIterable {
        case rt, pipelined, bulk, urgent, all
        /// Not part of `all`: opens `--count` connections (default 10 000) that send nothing, and reports the
        /// memory each costs (the server's with `--self`).
        case idle
        /// Not part of `all`: `--connections` clients (default 64), each with `--concurrency` requests in
        /// flight (default 16), against one server; reports the aggregate rate and, with `--self`, the
        /// server's CPU time per 1 000 messages.
        case fanin
        /// Not part of `all`: sequential round trips between two connections in this process over the
        /// in-memory transport (no URL needed): the library's own cost, for profiling.
        case inMemory = "in-memory"
        /// Not part of `all`: streams one `--size` message (default 1 GiB) to `sink` from a producer, and
        /// reports the peak memory of each side.
        case stream
        /// Not part of `all`: the server streams one `--size` reply (default 1 GiB) from a source holding one
        /// 1 MiB chunk (`stream-source`), read piece by piece; reports the peak memory of each side.
        case streamReply = "stream-reply"
    }

    enum Direction: String, ExpressibleByArgument {
        case up, down
    }

    @Argument(help: "ws:// or wss:// URL of a server (not with --self).") var url: String?
    @Flag(name: .customLong("self"), help: "Start a server in a child process first.") var startsServer = false
    @Option(
        help: """
            rt, pipelined, bulk, urgent, all; fanin (many clients), in-memory (no sockets), idle (connections \
            held open), stream or stream-reply (1 GiB streamed).
            """
    )
    var workload = Workload.all
    @Option(help: "Requests outstanding (pipelined: default 16 and 64; fanin: 16 per connection).")
    var concurrency: Int?
    @Option(help: "Client connections (fanin: 64).") var connections: Int?
    @Option(help: "Requests (rt: 20000, pipelined: 50000, urgent: 100).") var count: Int?
    @Option(help: "Body bytes (rt and pipelined: 100; bulk: 64 MiB; stream, stream-reply: 1 GiB).") var size: Int?
    @Option(help: "Bulk data: random or text.") var data: BenchmarkData?
    @Flag(help: "Compress bulk data.") var compressed = false
    @Option(help: "Bulk direction: up (to sink) or down (from source).") var direction: Direction?
    @Flag(help: "Also run the raw WebSocket shapes and print ratios to them.") var baseline = false
    /// For instruction counts (.ci/callgrind.sh): the raw task-shape echo alone, as the figure to divide by.
    @Flag(name: .customLong("raw-only"), help: .hidden) var rawOnly = false
    @Option(
        help: """
            rt, pipelined and bulk: also run each workload through this URL (a relay such as `blip proxy` in \
            front of the same server), taking turns with the direct URL round by round, and print the relay's \
            median as a ratio to direct's.
            """
    )
    var via: String?
    @Option(
        help: "rt, pipelined and bulk: rounds of each workload, reported as the median round (default 1; 5 with --via)."
    )
    var rounds: Int?
    @Flag(help: "rt and pipelined: the callers' tasks prefer the connection's event loop as their executor.")
    var onEventLoop = false
    @Flag(help: "rt and pipelined: each reply's callback sends the next request (sendRequest(…onReply:)).")
    var callbacks = false
    @Flag(help: "One JSON object per line per workload.") var json = false
    @Option(name: .customLong("subprotocol"), help: "Subprotocol to offer (repeatable).") var subprotocols: [String] =
        []
    @Option(help: "'seed' speaks the 2013 seed dialect (no subprotocol).") var dialect: DialectOption?
    @Option(help: "Write every frame under this folder.") var capture: String?
    @Flag(help: "Use a fixed 128 000-byte send window instead of the adaptive one.") var fixedWindow = false
    @Option(help: "Deflate level for compressed data, 0 (off) to 9.") var compressionLevel: Int32?
    @Option(
        help: """
            in-memory: rt (default), pipelined (--concurrency in flight, default 64) or bulk (one --size message             up, default 64 MiB).
            """
    )
    var shape: BenchRunner.InMemoryShape?
    @Flag(help: "in-memory: trace every request on both sides with the bootstrapped tracer (a no-op one).")
    var tracing = false
    @Option(help: "rt, pipelined and in-memory: give every request this timeout, in seconds (what a deadline costs).")
    var requestTimeout: Double?
    @OptionGroup var reach: ClientReachOptions
    @Flag(
        name: .customLong("warm-up"),
        inversion: .prefixedNo,
        help: "Send an untimed 8 MiB message before a bulk transfer, and before the urgent workload."
    )
    var warmsUp = true

    func validate() throws {
        if self.workload != .inMemory {
            switch (self.url, self.startsServer) {
            case (nil, false): throw ValidationError("give the server's URL, or --self to start one")
            case (.some, true): throw ValidationError("give the server's URL or --self, not both")
            case (.some(let url), false): try WebSocketURLArgument.check(url, as: "<url>")
            case (nil, true): break
            }
        }
        if let via = self.via { try WebSocketURLArgument.check(via, as: "--via") }
        if self.shape != nil && self.workload != .inMemory {
            throw ValidationError("--shape applies to --workload in-memory")
        }
        for (name, value) in [
            ("--count", self.count), ("--concurrency", self.concurrency), ("--connections", self.connections),
        ] {
            if let value, value < 1 { throw ValidationError("\(name) takes 1 or more, not \(value)") }
        }
        if let size = self.size, size < 0 { throw ValidationError("--size takes 0 or more bytes, not \(size)") }
        if let level = self.compressionLevel, !(0...9).contains(level) {
            throw ValidationError("--compression-level is 0 to 9")
        }
        if let rounds = self.rounds, !(1...1000).contains(rounds) {
            throw ValidationError("--rounds is 1 to 1000")
        }
        if self.via != nil && self.startsServer {
            throw ValidationError("--via needs the server's URL (the relay's upstream), not --self")
        }
        if self.rawOnly && (self.workload != .rt || self.baseline || self.runsRounds) {
            throw ValidationError("--raw-only runs the rt workload alone, without --baseline, --via or --rounds")
        }
        if self.runsRounds {
            guard [.rt, .pipelined, .bulk, .all].contains(self.workload) else {
                throw ValidationError("--via and --rounds apply to rt, pipelined and bulk")
            }
            if self.baseline { throw ValidationError("--baseline runs once, without --via or --rounds") }
        }
    }

    func run() async throws {
        var child: Process?
        var url = self.url ?? ""
        if self.startsServer {
            let (process, port) = try Self.startServer(
                seed: self.dialect?.isSeed ?? false,
                fixedWindow: self.fixedWindow,
                compressionLevel: self.compressionLevel
            )
            child = process
            url = "ws://127.0.0.1:\(port)/"
        }
        defer {
            child?.terminate()
            child?.waitUntilExit()
        }
        let runner = BenchRunner(url: url, options: self, serverProcessID: child?.processIdentifier)
        try await runner.runAll()
    }

    /// Starts `blip serve --port 0` in a child process and reads the port it prints.
    static func startServer(seed: Bool, fixedWindow: Bool, compressionLevel: Int32?) throws -> (Process, Int) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/proc/self/exe")
        if !FileManager.default.fileExists(atPath: "/proc/self/exe") {
            process.executableURL = URL(fileURLWithPath: CommandLine.arguments[0])
        }
        process.arguments =
            ["serve", "--port", "0", "--max-message-size", "\(1 << 20)", "--max-incoming-message-size", "\(1 << 31)"]
            + (seed ? ["--dialect", "seed"] : [])
            + (fixedWindow ? ["--fixed-window"] : [])
            + (compressionLevel.map { ["--compression-level", "\($0)"] } ?? [])
        let output = Pipe()
        process.standardOutput = output
        process.standardError = FileHandle.nullDevice
        try process.run()
        var line = Data()
        while let byte = try output.fileHandleForReading.read(upToCount: 1), !byte.isEmpty, byte != Data("\n".utf8) {
            line.append(byte)
        }
        let text = String(decoding: line, as: UTF8.self)
        guard let portText = text.split(separator: ":").last?.prefix(while: \.isNumber), let port = Int(portText) else {
            process.terminate()
            throw ValidationError("the child server did not start: \(text)")
        }
        return (process, port)
    }
}

/// One workload's figures.
struct BenchResult {
    var workload: String
    var count: Int
    var concurrency: Int
    var messagesPerSecond: Double?
    var p50: Duration?
    var p99: Duration?
    var mibPerSecond: Double?
    var wireBytes: Int?
    var data: String
    var compressed: Bool
    var direction: String
    var extra: [String: Any] = [:]
    /// To the raw shape with a task awaiting each message, and to the handler-style one (event loop only).
    var ratio: Double?
    var handlerRatio: Double?
    /// Through `--via`: this route's median to the direct route's, from the same run.
    var directRatio: Double?

    /// A round-trip workload's figures: `sortedLatencies` has one entry per message, in ascending order.
    static func roundTrips(
        _ workload: String,
        concurrency: Int,
        elapsed: Duration,
        sortedLatencies latencies: [Duration],
        wireBytes: Int? = nil
    ) -> BenchResult {
        BenchResult(
            workload: workload,
            count: latencies.count,
            concurrency: concurrency,
            messagesPerSecond: Double(latencies.count) / elapsed.seconds,
            p50: percentile(latencies, 0.5),
            p99: percentile(latencies, 0.99),
            wireBytes: wireBytes,
            data: "pattern",
            compressed: false,
            direction: "both"
        )
    }

    var json: [String: Any] {
        var object: [String: Any] = [
            "workload": self.workload, "count": self.count, "concurrency": self.concurrency, "data": self.data,
            "compressed": self.compressed, "direction": self.direction,
            "msgs_per_s": self.messagesPerSecond.map { ($0 * 10).rounded() / 10 } ?? NSNull(),
            "p50_us": self.p50.map { $0.microseconds } ?? NSNull(),
            "p99_us": self.p99.map { $0.microseconds } ?? NSNull(),
            "mib_per_s": self.mibPerSecond.map { ($0 * 10).rounded() / 10 } ?? NSNull(),
            "wire_bytes": self.wireBytes ?? NSNull(),
        ]
        if let ratio = self.ratio { object["ratio_to_baseline"] = (ratio * 1000).rounded() / 1000 }
        if let ratio = self.handlerRatio {
            object["ratio_to_handler_baseline"] = (ratio * 1000).rounded() / 1000
        }
        if let ratio = self.directRatio { object["ratio_to_direct"] = (ratio * 1000).rounded() / 1000 }
        for (key, value) in self.extra { object[key] = value }
        return object
    }

    var line: String {
        var parts = ["\(self.workload)".padding(toLength: 22, withPad: " ", startingAt: 0)]
        if let rate = self.messagesPerSecond { parts.append(String(format: "%9.0f msg/s", rate)) }
        if let p50 = self.p50, let p99 = self.p99 {
            parts.append(String(format: "p50 %7.1f µs  p99 %8.1f µs", p50.microseconds, p99.microseconds))
        }
        if let throughput = self.mibPerSecond { parts.append(String(format: "%8.1f MiB/s", throughput)) }
        if let wire = self.wireBytes { parts.append("wire \(wire) B") }
        for (key, value) in self.extra.sorted(by: { $0.key < $1.key }) { parts.append("\(key) \(value)") }
        if let ratio = self.ratio { parts.append(String(format: "= %.2fx baseline", ratio)) }
        if let ratio = self.handlerRatio { parts.append(String(format: "%.2fx handler baseline", ratio)) }
        if let ratio = self.directRatio { parts.append(String(format: "= %.2fx direct", ratio)) }
        return parts.joined(separator: "  ")
    }
}

extension Duration {
    var microseconds: Double {
        Double(self.components.seconds) * 1e6 + Double(self.components.attoseconds) / 1e12
    }

    var seconds: Double { self.microseconds / 1e6 }
}

func percentile(_ sorted: [Duration], _ fraction: Double) -> Duration? {
    guard !sorted.isEmpty else { return nil }
    return sorted[min(sorted.count - 1, Int(Double(sorted.count) * fraction))]
}

extension BenchRunner.InMemoryShape: ExpressibleByArgument {}
