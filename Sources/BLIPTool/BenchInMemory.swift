internal import BLIP
internal import NIOCore

extension BenchRunner {
    /// Sequential 100-byte echo round trips between two connections in this process over the in-memory
    /// transport, against the standard profiles: the library's own cost per round trip, without sockets or a
    /// second process. Run under `valgrind --tool=callgrind` at two counts, the difference gives the
    /// instructions per round trip regardless of machine noise. `--tracing` traces both sides, propagating
    /// the context, with the tracer bootstrapped (none here: swift-distributed-tracing's no-op one), which is
    /// what tracing costs the library itself.
    func inMemoryRoundTrips(count: Int, size: Int) async throws -> BenchResult {
        let (clientTransport, serverTransport) = BLIPInMemoryTransport.makePair()
        var router = BLIPRouter()
        router.register(StandardProfiles())
        var configuration = BLIPConnection.Configuration()
        if self.options.tracing { configuration.tracing = .enabled(propagatesTraceContext: true) }
        let server = BLIPConnection(transport: serverTransport, configuration: configuration, router: router)
        async let serverRun = server.run()
        let request = BLIPRequest(profile: "echo", body: BenchmarkData.pattern(size))
        let (elapsed, latencies) = try await withBLIPConnection(over: clientTransport, configuration: configuration) {
            client in
            for _ in 0..<100 { _ = try await client.sendRequest(request) }
            var latencies: [Duration] = []
            latencies.reserveCapacity(count)
            let started = ContinuousClock.now
            for _ in 0..<count {
                let start = ContinuousClock.now
                _ = try await client.sendRequest(request)
                latencies.append(ContinuousClock.now - start)
            }
            return (ContinuousClock.now - started, latencies.sorted())
        }
        _ = await server.close()
        _ = await serverRun
        return .roundTrips(
            self.options.tracing ? "in-memory-rt-traced" : "in-memory-rt",
            concurrency: 1,
            elapsed: elapsed,
            sortedLatencies: latencies
        )
    }
}
