import Benchmark

let benchmarks: @Sendable () -> Void = {
    Benchmark.defaultConfiguration = .init(
        metrics: [.wallClock, .mallocCountTotal, .throughput],
        warmupIterations: 50,
        maxDuration: .seconds(2),
        maxIterations: 20_000,
        thresholds: [.mallocCountTotal: .init(absolute: [.p90: 1])]
    )
    wireBenchmarks()
    engineBenchmarks()
    connectionBenchmarks()
}
