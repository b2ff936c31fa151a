internal import BLIP
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
        let traced = self.options.tracing ? "-traced" : ""
        let progress = self.progress
        /// What a run measured, made into a `BenchResult` (which is not `Sendable`) afterwards.
        enum Measured: Sendable {
            case roundTrips(String, concurrency: Int, elapsed: Duration, sortedLatencies: [Duration])
            case bulk(String, size: Int, elapsed: Duration)
        }
        let measured = try await withBLIPConnection(over: clientTransport, configuration: configuration) {
            client -> Measured in
            switch shape {
            case .rt, .pipelined:
                let concurrency = shape == .rt ? 1 : self.options.concurrency ?? 64
                let name = shape == .rt ? "in-memory-rt\(traced)" : "in-memory-pipelined-\(concurrency)\(traced)"
                let (elapsed, latencies, _) = try await Self.measureRoundTrips(
                    client,
                    request: BLIPRequest(profile: "echo", body: BenchmarkData.pattern(size ?? 100)),
                    count: count ?? (shape == .rt ? 20_000 : 50_000),
                    concurrency: concurrency,
                    warmUp: 100,
                    name: name,
                    progress: progress,
                    byCallbacks: false
                )
                return .roundTrips(name, concurrency: concurrency, elapsed: elapsed, sortedLatencies: latencies)
            case .bulk:
                let size = size ?? 64 << 20
                let data = self.options.data ?? .random
                let request = BLIPRequest(profile: "sink", body: data.bytes(size), compressed: self.options.compressed)
                let started = ContinuousClock.now
                let reply = try await client.sendRequest(request)
                let elapsed = ContinuousClock.now - started
                guard reply.properties["Count"] == "\(size)" else {
                    throw BenchError("sink counted \(reply.properties)")
                }
                let name = "in-memory-bulk-\(data)\(self.options.compressed ? "-compressed" : "")\(traced)"
                return .bulk(name, size: size, elapsed: elapsed)
            }
        }
        _ = await server.close()
        _ = await serverRun
        switch measured {
        case .roundTrips(let name, let concurrency, let elapsed, let latencies):
            return .roundTrips(name, concurrency: concurrency, elapsed: elapsed, sortedLatencies: latencies)
        case .bulk(let name, let size, let elapsed):
            return BenchResult(
                workload: name,
                count: 1,
                concurrency: 1,
                mibPerSecond: Double(size) / 1_048_576 / elapsed.seconds,
                data: (self.options.data ?? .random).rawValue,
                compressed: self.options.compressed,
                direction: "up"
            )
        }
    }
}
