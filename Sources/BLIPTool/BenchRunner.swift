internal import BLIP
internal import BLIPWebSocket
internal import Foundation
internal import Logging
internal import NIOCore
internal import Synchronization

/// Runs the workloads of `blip bench`, each on a fresh connection, and prints their figures.
struct BenchRunner {
    let url: String
    let options: BenchCommand
    let progress: Progress
    /// The server's process, when `--self` started it (to read its memory).
    let serverProcessID: Int32?

    init(url: String, options: BenchCommand, serverProcessID: Int32? = nil) {
        self.url = url
        self.options = options
        self.serverProcessID = serverProcessID
        self.progress = Progress(enabled: isatty(STDERR_FILENO) == 1)
    }

    var clientConfiguration: BLIPWebSocketClient.Configuration {
        var configuration = BLIPWebSocketClient.Configuration()
        if !self.options.subprotocols.isEmpty { configuration.subprotocols = self.options.subprotocols }
        configuration.usesSeedDialect = self.options.dialect?.isSeed ?? false
        configuration.captureDirectory = self.options.capture
        configuration.heartbeatInterval = nil
        configuration.maximumMessageSize = 1 << 20
        configuration.connection.maximumIncomingMessageSize = 1 << 30
        if self.options.fixedWindow { configuration.connection.sendWindow = .fixed(128_000) }
        configuration.connection.compressionLevel = self.options.compressionLevel
        configuration.connection.requestTimeout = self.options.requestTimeout.map { .milliseconds($0 * 1000) }
        self.options.reach.apply(to: &configuration)
        return configuration
    }

    func connect<T: Sendable>(_ body: @Sendable (BLIPConnection) async throws -> T) async throws -> T {
        var logger = Logger(label: "blip.bench")
        logger.logLevel = .warning
        return try await BLIPWebSocketClient.connect(
            to: self.url,
            configuration: self.clientConfiguration,
            logger: logger,
            body
        )
    }

    func report(_ result: BenchResult) {
        self.progress.clear()
        if self.options.json {
            let data = (try? JSONSerialization.data(withJSONObject: result.json, options: [.sortedKeys])) ?? Data()
            print(String(decoding: data, as: UTF8.self))
        } else {
            print(result.line)
        }
        fflush(nil)
    }

    func runAll() async throws {
        let workload = self.options.workload
        let smallSize = self.options.size ?? 100
        if workload == .idle {
            self.report(try await self.idleConnections(count: self.options.count ?? 10_000))
        }
        if workload == .stream {
            self.report(
                try await self.streamedMessage(size: self.options.size ?? 1 << 30, data: self.options.data ?? .random)
            )
        }
        if workload == .streamReply {
            self.report(
                try await self.streamedReply(size: self.options.size ?? 1 << 30, data: self.options.data ?? .random)
            )
        }
        if workload == .rt || workload == .all {
            let count = self.options.count ?? 20_000
            let measure = { (runner: BenchRunner) in
                try await runner.roundTrips(count: count, concurrency: 1, warmUp: 1000, size: smallSize, name: "rt")
            }
            if self.options.rawOnly {
                self.report(
                    try await self.rawRoundTrips(
                        count: count,
                        concurrency: 1,
                        warmUp: 1000,
                        size: smallSize,
                        name: "raw-rt"
                    )
                )
            } else if self.options.runsRounds {
                try await self.reportRounds(measure)
            } else {
                var result = try await measure(self)
                if self.options.baseline {
                    try await self.compareToBaselines(
                        &result,
                        count: count,
                        concurrency: 1,
                        warmUp: 1000,
                        size: smallSize
                    )
                }
                self.report(result)
            }
        }
        if workload == .pipelined || workload == .all {
            for concurrency in self.options.concurrency.map({ [$0] }) ?? [16, 64] {
                let count = self.options.count ?? 50_000
                let measure = { (runner: BenchRunner) in
                    try await runner.roundTrips(
                        count: count,
                        concurrency: concurrency,
                        warmUp: 200,
                        size: smallSize,
                        name: "pipelined-\(concurrency)"
                    )
                }
                if self.options.runsRounds {
                    try await self.reportRounds(measure)
                    continue
                }
                var result = try await measure(self)
                if self.options.baseline {
                    try await self.compareToBaselines(
                        &result,
                        count: count,
                        concurrency: concurrency,
                        warmUp: 200,
                        size: smallSize
                    )
                }
                self.report(result)
            }
        }
        if workload == .bulk || workload == .all {
            let size = self.options.size ?? 64 << 20
            let everything = workload == .all && self.options.data == nil && self.options.direction == nil
            let shapes: [(BenchmarkData, Bool, BenchCommand.Direction)] =
                everything
                ? [BenchmarkData.random, .text].flatMap { data in
                    [false, true].flatMap { compressed in
                        [BenchCommand.Direction.up, .down].map { (data, compressed, $0) }
                    }
                }
                : [(self.options.data ?? .random, self.options.compressed, self.options.direction ?? .up)]
            var baselines: [BenchCommand.Direction: BenchResult] = [:]
            for (data, compressed, direction) in shapes {
                let measure = { (runner: BenchRunner) in
                    try await runner.bulk(size: size, data: data, compressed: compressed, direction: direction)
                }
                if self.options.runsRounds {
                    try await self.reportRounds(measure)
                    continue
                }
                var result = try await measure(self)
                if self.options.baseline {
                    if baselines[direction] == nil {
                        let raw = try await self.rawBulk(size: size, direction: direction)
                        baselines[direction] = raw
                        self.report(raw)
                    }
                    result.ratio = (result.mibPerSecond ?? 0) / (baselines[direction]!.mibPerSecond ?? 1)
                }
                self.report(result)
            }
        }
        if workload == .inMemory {
            self.report(
                try await self.inMemory(self.options.shape ?? .rt, count: self.options.count, size: self.options.size)
            )
        }
        if workload == .fanin {
            self.report(
                try await self.fanIn(
                    connections: self.options.connections ?? 64,
                    concurrency: self.options.concurrency ?? 16,
                    count: self.options.count ?? 200_000,
                    size: smallSize
                )
            )
        }
        // In rounds, `all` is the workloads that have a single figure to take the median of.
        if workload == .urgent || (workload == .all && !self.options.runsRounds) {
            if self.options.warmsUp && workload == .urgent {
                // Untimed, on a connection of its own: the first bulk message a process sends pays one-time
                // costs (the runtime's first look-ups of types and conformances on the paths it takes) that
                // otherwise land in the tail of the first measured run, urgent's (it runs before the normal
                // control). With `all`, the bulk workloads have paid them already.
                _ = try await self.urgent(count: 10, urgent: true, bulkSize: 8 << 20)
            }
            for urgent in [true, false] {
                self.report(try await self.urgent(count: self.options.count ?? 100, urgent: urgent))
            }
        }
    }

    // MARK: - BLIP workloads

    func roundTrips(count: Int, concurrency: Int, warmUp: Int, size: Int, name: String) async throws -> BenchResult {
        let request = BLIPRequest(profile: "echo", body: BenchmarkData.pattern(size))
        let progress = self.progress
        let onLoop = self.options.onEventLoop
        let callbacks = self.options.callbacks
        let (elapsed, latencies, wire) = try await self.connect { connection in
            // With --on-event-loop the callers' tasks run on the connection's event loop.
            try await withTaskExecutorPreference(onLoop ? connection.taskExecutor : nil) {
                try await Self.measureRoundTrips(
                    connection,
                    request: request,
                    count: count,
                    concurrency: concurrency,
                    warmUp: warmUp,
                    name: name,
                    progress: progress,
                    byCallbacks: callbacks
                )
            }
        }
        return .roundTrips(
            callbacks ? "\(name)-callbacks" : onLoop ? "\(name)-on-loop" : name,
            concurrency: concurrency,
            elapsed: elapsed,
            sortedLatencies: latencies,
            wireBytes: wire
        )
    }

    static func measureRoundTrips(
        _ connection: BLIPConnection,
        request: BLIPRequest,
        count: Int,
        concurrency: Int,
        warmUp: Int,
        name: String,
        progress: Progress,
        byCallbacks: Bool
    ) async throws -> (Duration, [Duration], Int) {
        for _ in 0..<warmUp { _ = try await connection.sendRequest(request) }
        let before = connection.statistics
        let started = ContinuousClock.now
        let latencies =
            byCallbacks
            ? try await BenchReplyCallbacks.measure(request, on: connection, count: count, concurrency: concurrency)
            : try await Self.keepInFlight(
                request,
                on: connection,
                concurrency: concurrency,
                until: SharedCounter(),
                reaches: count,
                name: name,
                progress: progress
            )
        let elapsed = ContinuousClock.now - started
        let after = connection.statistics
        return (
            elapsed, latencies.sorted(),
            after.bytesSent + after.bytesReceived - before.bytesSent - before.bytesReceived
        )
    }

    /// Keeps `concurrency` copies of `request` in flight on `connection` until `next` (shared with other
    /// connections, for fanin) reaches `count`; returns each request's round-trip time, in no order.
    static func keepInFlight(
        _ request: BLIPRequest,
        on connection: BLIPConnection,
        concurrency: Int,
        until next: SharedCounter,
        reaches count: Int,
        name: String,
        progress: Progress
    ) async throws -> [Duration] {
        try await withThrowingTaskGroup(of: [Duration].self) { group in
            for _ in 0..<concurrency {
                group.addTask {
                    var latencies: [Duration] = []
                    while next.value.add(1, ordering: .relaxed).oldValue < count {
                        let start = ContinuousClock.now
                        _ = try await connection.sendRequest(request)
                        latencies.append(ContinuousClock.now - start)
                        if latencies.count % 1000 == 0 {
                            progress.show(name, next.value.load(ordering: .relaxed), count)
                        }
                    }
                    return latencies
                }
            }
            return try await group.reduce(into: []) { $0 += $1 }
        }
    }

    func bulk(size: Int, data: BenchmarkData, compressed: Bool, direction: BenchCommand.Direction) async throws
        -> BenchResult
    {
        let name = "bulk-\(direction)-\(data)\(compressed ? "-compressed" : "")"
        self.progress.show(name, 0, 1)
        let serverProcessID = self.serverProcessID
        let (elapsed, wire, serverCPU) = try await self.connect { connection in
            switch direction {
            case .up:
                if self.options.warmsUp {
                    let warm = data.bytes(8 << 20)
                    _ = try await connection.sendRequest(
                        BLIPRequest(profile: "sink", body: warm, compressed: compressed)
                    )
                }
                let body = data.bytes(size)
                let before = connection.statistics
                let cpuBefore = serverProcessID.flatMap(ProcessCPUTime.of)
                let started = ContinuousClock.now
                let reply = try await connection.sendRequest(
                    BLIPRequest(profile: "sink", body: body, compressed: compressed)
                )
                let elapsed = ContinuousClock.now - started
                let cpu = Self.cpuSpent(by: serverProcessID, since: cpuBefore)
                guard reply.properties["Count"] == "\(size)" else {
                    throw BenchError("sink counted \(reply.properties)")
                }
                let after = connection.statistics
                return (elapsed, after.bytesSent - before.bytesSent, cpu)
            case .down:
                func download(_ count: Int) async throws -> Int {
                    let request = BLIPRequest(
                        profile: "source",
                        properties: ["Count": "\(count)", "Data": data.rawValue, "Compress": compressed ? "yes" : "no"]
                    )
                    let reply = try await connection.sendRequestStreamingReply(request)
                    var received = 0
                    for try await piece in reply.body { received += piece.readableBytes }
                    return received
                }
                if self.options.warmsUp { _ = try await download(8 << 20) }
                let before = connection.statistics
                let cpuBefore = serverProcessID.flatMap(ProcessCPUTime.of)
                let started = ContinuousClock.now
                let received = try await download(size)
                let elapsed = ContinuousClock.now - started
                let cpu = Self.cpuSpent(by: serverProcessID, since: cpuBefore)
                guard received == size else { throw BenchError("received \(received) of \(size) bytes") }
                return (elapsed, connection.statistics.bytesReceived - before.bytesReceived, cpu)
            }
        }
        var result = BenchResult(
            workload: name,
            count: 1,
            concurrency: 1,
            mibPerSecond: Double(size) / 1_048_576 / elapsed.seconds,
            wireBytes: wire,
            data: data.rawValue,
            compressed: compressed,
            direction: direction.rawValue
        )
        if let serverCPU, size > 0 {
            // With --self: the server's CPU time (user + system, all threads) per MiB of the message.
            result.extra["server_cpu_ms_per_mib"] =
                (serverCPU.seconds * 1000 / (Double(size) / 1_048_576) * 1000)
                .rounded() / 1000
        }
        return result
    }

    /// The CPU time `processID` used since `before` (nil without a process to read).
    static func cpuSpent(by processID: Int32?, since before: Duration?) -> Duration? {
        guard let before, let after = processID.flatMap(ProcessCPUTime.of) else { return nil }
        return after - before
    }

    /// 100 small requests while a 64 MiB message streams, once all urgent, once (on a fresh connection)
    /// all normal.
    func urgent(count: Int, urgent: Bool, bulkSize: Int = 64 << 20) async throws -> BenchResult {
        let name = urgent ? "urgent" : "urgent-control-normal"
        self.progress.show(name, 0, count)
        let bulkBody = BenchmarkData.random(bulkSize)
        let (latencies, duringBulk) = try await self.connect { connection in
            let start = connection.statistics.bytesSent
            let bulkDone = Atomic<Bool>(false)
            let bulk = Task {
                defer { bulkDone.store(true, ordering: .releasing) }
                return try await connection.sendRequest(BLIPRequest(profile: "sink", body: bulkBody))
            }
            // Start once the first 1 MiB of the bulk message has been framed (bounded: 10 s).
            let deadline = ContinuousClock.now + .seconds(10)
            while connection.statistics.bytesSent - start < 1 << 20 && ContinuousClock.now < deadline {
                try await Task.sleep(for: .microseconds(200))
            }
            var latencies: [Duration] = []
            var during: [Duration] = []
            let request = BLIPRequest(profile: "echo", body: BenchmarkData.pattern(100), urgent: urgent)
            for _ in 0..<count {
                let started = ContinuousClock.now
                _ = try await connection.sendRequest(request)
                let latency = ContinuousClock.now - started
                latencies.append(latency)
                if !bulkDone.load(ordering: .acquiring) { during.append(latency) }
            }
            _ = try await bulk.value
            return (latencies.sorted(), during.sorted())
        }
        return BenchResult(
            workload: name,
            count: count,
            concurrency: 1,
            p50: percentile(latencies, 0.5),
            p99: percentile(latencies, 0.99),
            data: "pattern",
            compressed: false,
            direction: "both",
            extra: [
                "finished_during_bulk": duringBulk.count,
                "during_bulk_p50_us": percentile(duringBulk, 0.5).map { Int($0.seconds * 1e6) } ?? 0,
                "during_bulk_p99_us": percentile(duringBulk, 0.99).map { Int($0.seconds * 1e6) } ?? 0,
            ]
        )
    }

    // MARK: - Raw WebSocket baselines

    /// Runs the two raw shapes of a round-trip workload (`baseline-…`: a task awaiting each echo;
    /// `baseline-handler-…`: echoes driven from the event loop) and sets `result`'s ratios to them.
    func compareToBaselines(_ result: inout BenchResult, count: Int, concurrency: Int, warmUp: Int, size: Int)
        async throws
    {
        let raw = try await self.rawRoundTrips(
            count: count,
            concurrency: concurrency,
            warmUp: warmUp,
            size: size,
            name: "baseline-\(result.workload)"
        )
        self.report(raw)
        let handler = try await self.handlerRoundTrips(
            count: count,
            concurrency: concurrency,
            warmUp: warmUp,
            size: size,
            name: "baseline-handler-\(result.workload)"
        )
        self.report(handler)
        result.ratio = (result.messagesPerSecond ?? 0) / (raw.messagesPerSecond ?? 1)
        result.handlerRatio = (result.messagesPerSecond ?? 0) / (handler.messagesPerSecond ?? 1)
    }

    /// The handler-style raw shape: echoes sent and counted on the event loop, one flush per read batch.
    func handlerRoundTrips(count: Int, concurrency: Int, warmUp: Int, size: Int, name: String) async throws
        -> BenchResult
    {
        let socket = try await self.rawConnect()
        defer { socket.close() }
        let message = BenchmarkData.pattern(size)
        self.progress.show(name, 0, 1)
        _ = try await socket.measureEchoes(of: message, count: warmUp, inFlight: concurrency)
        let started = ContinuousClock.now
        let latencies = try await socket.measureEchoes(of: message, count: count, inFlight: concurrency).sorted()
        let elapsed = ContinuousClock.now - started
        return .roundTrips(name, concurrency: concurrency, elapsed: elapsed, sortedLatencies: latencies)
    }

    func rawConnect() async throws -> BLIPRawWebSocket {
        var configuration = self.clientConfiguration
        configuration.captureDirectory = nil
        return try await BLIPRawWebSocket.connect(to: self.url, configuration: configuration)
    }

    func rawRoundTrips(count: Int, concurrency: Int, warmUp: Int, size: Int, name: String) async throws -> BenchResult {
        let socket = try await self.rawConnect()
        defer { socket.close() }
        let message = BenchmarkData.pattern(size)
        for _ in 0..<warmUp {
            socket.send(message)
            _ = try await socket.receive()
        }
        // Echoes come back in order: a FIFO of send times gives each message's latency.
        var sendTimes: [ContinuousClock.Instant] = []
        sendTimes.reserveCapacity(count)
        var latencies: [Duration] = []
        latencies.reserveCapacity(count)
        let started = ContinuousClock.now
        for _ in 0..<min(concurrency, count) {
            sendTimes.append(.now)
            socket.send(message)
        }
        while latencies.count < count {
            guard try await socket.receive() != nil else { throw BenchError("raw connection closed") }
            latencies.append(ContinuousClock.now - sendTimes[latencies.count])
            if sendTimes.count < count {
                sendTimes.append(.now)
                socket.send(message)
            }
            if latencies.count % 1000 == 0 { self.progress.show(name, latencies.count, count) }
        }
        let elapsed = ContinuousClock.now - started
        latencies.sort()
        return .roundTrips(name, concurrency: concurrency, elapsed: elapsed, sortedLatencies: latencies)
    }

    func rawBulk(size: Int, direction: BenchCommand.Direction) async throws -> BenchResult {
        let socket = try await self.rawConnect()
        defer { socket.close() }
        let name = "baseline-bulk-\(direction)"
        self.progress.show(name, 0, 1)
        let data = BenchmarkData.random(size)
        func transfer(_ count: Int) async throws {
            switch direction {
            case .up:
                socket.send(ByteBuffer(string: "sink:\(count)"), text: true)
                var offset = 0
                while offset < count {
                    let length = min(16_384, count - offset)
                    socket.send(data.getSlice(at: offset, length: length)!)
                    offset += length
                }
                guard let reply = try await socket.receive(), reply.isText, String(buffer: reply.message) == "\(count)"
                else {
                    throw BenchError("raw sink did not confirm")
                }
            case .down:
                socket.send(ByteBuffer(string: "source:\(count)"), text: true)
                var received = 0
                while let (message, isText) = try await socket.receive() {
                    if isText { break }
                    received += message.readableBytes
                }
                guard received == count else { throw BenchError("raw source sent \(received) of \(count)") }
            }
        }
        if self.options.warmsUp { try await transfer(min(size, 8 << 20)) }
        let started = ContinuousClock.now
        try await transfer(size)
        let elapsed = ContinuousClock.now - started
        return BenchResult(
            workload: name,
            count: 1,
            concurrency: 1,
            mibPerSecond: Double(size) / 1_048_576 / elapsed.seconds,
            wireBytes: size,
            data: "random",
            compressed: false,
            direction: direction.rawValue
        )
    }
}

/// A counter shared by the tasks of one workload.
final class SharedCounter: Sendable {
    let value = Atomic<Int>(0)
}

struct BenchError: Error, CustomStringConvertible {
    var description: String
    init(_ description: String) { self.description = description }
}

/// A one-line progress display on a terminal's standard error; silent when it is not a terminal.
final class Progress: Sendable {
    let enabled: Bool

    init(enabled: Bool) {
        self.enabled = enabled
    }

    func show(_ name: String, _ done: Int, _ total: Int) {
        guard self.enabled else { return }
        let width = 30
        let filled = total == 0 ? 0 : min(width, done * width / total)
        let bar = String(repeating: "#", count: filled) + String(repeating: ".", count: width - filled)
        FileHandle.standardError.write(
            Data("\r\(name.padding(toLength: 24, withPad: " ", startingAt: 0)) [\(bar)]".utf8)
        )
    }

    func clear() {
        guard self.enabled else { return }
        FileHandle.standardError.write(Data("\r\u{1B}[2K".utf8))
    }
}
