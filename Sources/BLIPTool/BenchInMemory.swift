internal import BLIP
internal import NIOConcurrencyHelpers
internal import NIOCore

extension BenchRunner {
    /// The shapes of `--workload in-memory`: the standard workloads between two connections in this process.
    enum InMemoryShape: String, CaseIterable {
        /// Sequential 100-byte echo round trips.
        case rt
        /// `--concurrency` (default 64) echo requests kept in flight.
        case pipelined
        /// One `--size` message (default 64 MiB) up to `sink`.
        case bulk
    }

    /// A standard workload between two connections in this process over the in-memory transport, against
    /// the standard profiles: the library's own cost, without sockets or a second process. Run under
    /// `valgrind --tool=callgrind` at two counts, the difference gives the instructions per message
    /// regardless of machine noise. `--tracing` traces both sides, propagating the context, with the tracer
    /// bootstrapped (none here: swift-distributed-tracing's no-op one), which is what tracing costs the
    /// library itself.
    func inMemory(_ shape: InMemoryShape, count: Int?, size: Int?) async throws -> BenchResult {
        let (clientTransport, serverTransport) = BLIPInMemoryTransport.makePair()
        var router = BLIPRouter()
        router.register(StandardProfiles())
        var configuration = BLIPConnection.Configuration()
        configuration.maximumIncomingMessageSize = 1 << 30
        if self.options.tracing { configuration.tracing = .enabled(propagatesTraceContext: true) }
        let server = BLIPConnection(transport: serverTransport, configuration: configuration, router: router)
        async let serverRun = server.run()
        configuration.requestTimeout = self.options.requestTimeout.map { .milliseconds($0 * 1000) }
        let traced = self.options.tracing ? "-traced" : ""
        let progress = self.progress
        /// What a run measured, made into a `BenchResult` (which is not `Sendable`) afterwards.
        enum Measured: Sendable {
            case roundTrips(String, concurrency: Int, elapsed: Duration, sortedLatencies: [Duration])
            case bulk(String, size: Int, elapsed: Duration)
        }
        /// Each side's lock acquisitions during the measured part.
        let locks = LockCounts(server: server)
        let measured = try await withBLIPConnection(over: clientTransport, configuration: configuration) {
            client -> Measured in
            switch shape {
            case .rt, .pipelined:
                let concurrency = shape == .rt ? 1 : self.options.concurrency ?? 64
                let name = shape == .rt ? "in-memory-rt\(traced)" : "in-memory-pipelined-\(concurrency)\(traced)"
                let request = BLIPRequest(profile: "echo", body: BenchmarkData.pattern(size ?? 100))
                for _ in 0..<100 { _ = try await client.sendRequest(request) }
                locks.start(client: client)
                let (elapsed, latencies, _) = try await Self.measureRoundTrips(
                    client,
                    request: request,
                    count: count ?? (shape == .rt ? 20_000 : 50_000),
                    concurrency: concurrency,
                    warmUp: 0,
                    name: name,
                    progress: progress,
                    byCallbacks: false
                )
                locks.stop(client: client)
                return .roundTrips(name, concurrency: concurrency, elapsed: elapsed, sortedLatencies: latencies)
            case .bulk:
                let size = size ?? 64 << 20
                let data = self.options.data ?? .random
                let request = BLIPRequest(profile: "sink", body: data.bytes(size), compressed: self.options.compressed)
                locks.start(client: client)
                let started = ContinuousClock.now
                let reply = try await client.sendRequest(request)
                let elapsed = ContinuousClock.now - started
                locks.stop(client: client)
                guard reply.properties["Count"] == "\(size)" else {
                    throw BenchError("sink counted \(reply.properties)")
                }
                let name = "in-memory-bulk-\(data)\(self.options.compressed ? "-compressed" : "")\(traced)"
                return .bulk(name, size: size, elapsed: elapsed)
            }
        }
        _ = await server.close()
        _ = await serverRun
        var result: BenchResult
        let messages: Double
        switch measured {
        case .roundTrips(let name, let concurrency, let elapsed, let latencies):
            result = .roundTrips(name, concurrency: concurrency, elapsed: elapsed, sortedLatencies: latencies)
            messages = Double(latencies.count)
        case .bulk(let name, let size, let elapsed):
            messages = 1
            result = BenchResult(
                workload: name,
                count: 1,
                concurrency: 1,
                mibPerSecond: Double(size) / 1_048_576 / elapsed.seconds,
                data: (self.options.data ?? .random).rawValue,
                compressed: self.options.compressed,
                direction: "up"
            )
        }
        // Locks taken per message, each side (the client's covers sending a request and reading its reply).
        let (clientLocks, serverLocks) = locks.counts
        result.extra["client_locks_per_msg"] = (Double(clientLocks) / messages * 100).rounded() / 100
        result.extra["server_locks_per_msg"] = (Double(serverLocks) / messages * 100).rounded() / 100
        return result
    }
}

/// Lock acquisitions of the two connections between `start` and `stop`.
final class LockCounts: Sendable {
    private let server: BLIPConnection
    private let state = NIOLockedValueBox<(client: UInt64, server: UInt64)>((0, 0))

    init(server: BLIPConnection) {
        self.server = server
    }

    func start(client: BLIPConnection) {
        let now = (client.lockAcquisitions, self.server.lockAcquisitions)
        self.state.withLockedValue { $0 = now }
    }

    func stop(client: BLIPConnection) {
        let now = (client.lockAcquisitions, self.server.lockAcquisitions)
        self.state.withLockedValue { $0 = (now.0 - $0.client, now.1 - $0.server) }
    }

    var counts: (UInt64, UInt64) { self.state.withLockedValue { ($0.client, $0.server) } }
}
