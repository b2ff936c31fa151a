internal import BLIP
internal import BLIPWebSocket
internal import Foundation
internal import NIOConcurrencyHelpers
internal import NIOCore

extension BenchRunner {
    /// `connections` clients against one server, each keeping `concurrency` 100-byte echo requests in flight,
    /// `count` requests in all. Every client connects first; the clock starts when the last one has. Reports
    /// the aggregate rate, the latency percentiles over every request, and (with `--self`) the server's CPU
    /// seconds per 1 000 messages.
    func fanIn(connections: Int, concurrency: Int, count: Int, size: Int) async throws -> BenchResult {
        let name = "fanin-\(connections)x\(concurrency)"
        let request = BLIPRequest(profile: "echo", body: BenchmarkData.pattern(size))
        let ready = ConnectedClients(expected: connections)
        let next = SharedCounter()
        let progress = self.progress
        let configuration = {
            var configuration = self.clientConfiguration
            configuration.connectTimeout = .seconds(30)
            return configuration
        }()
        let clock = FanInClock()
        let latencies = try await withThrowingTaskGroup(of: [Duration].self) { group in
            for _ in 0..<connections {
                group.addTask {
                    try await BLIPWebSocketClient.connect(to: self.url, configuration: configuration) { connection in
                        for _ in 0..<10 { _ = try await connection.sendRequest(request) }  // warm up
                        await ready.arrive()
                        clock.startIfNeeded(cpu: self.serverProcessID.flatMap(ProcessCPUTime.of))
                        return try await Self.keepInFlight(
                            request,
                            on: connection,
                            concurrency: concurrency,
                            until: next,
                            reaches: count,
                            name: name,
                            progress: progress
                        )
                    }
                }
            }
            return try await group.reduce(into: []) { $0 += $1 }.sorted()
        }
        let (elapsed, cpuBefore) = clock.stop()
        var extra: [String: Any] = ["connections": connections]
        if let cpuBefore, let cpuAfter = self.serverProcessID.flatMap(ProcessCPUTime.of) {
            let perThousand = (cpuAfter - cpuBefore).seconds / Double(latencies.count) * 1000
            extra["server_cpu_s_per_1000"] = (perThousand * 10_000).rounded() / 10_000
        }
        var result = BenchResult.roundTrips(
            name,
            concurrency: connections * concurrency,
            elapsed: elapsed,
            sortedLatencies: latencies
        )
        result.extra = extra
        return result
    }
}

/// Holds every client until all have connected, so that the measured interval has them all sending.
actor ConnectedClients {
    private let expected: Int
    private var arrived = 0
    private var waiting: [CheckedContinuation<Void, Never>] = []

    init(expected: Int) {
        self.expected = expected
    }

    func arrive() async {
        self.arrived += 1
        if self.arrived >= self.expected {
            for waiter in self.waiting { waiter.resume() }
            self.waiting.removeAll()
            return
        }
        await withCheckedContinuation { self.waiting.append($0) }
    }
}

/// When the first client was released, and the server's CPU time then.
final class FanInClock: Sendable {
    private let start = NIOLockedValueBox<(ContinuousClock.Instant, Duration?)?>(nil)

    func startIfNeeded(cpu: @autoclosure () -> Duration?) {
        self.start.withLockedValue { start in
            if start == nil { start = (.now, cpu()) }
        }
    }

    func stop() -> (elapsed: Duration, cpuAtStart: Duration?) {
        let (started, cpu) = self.start.withLockedValue { $0 } ?? (.now, nil)
        return (.now - started, cpu)
    }
}
