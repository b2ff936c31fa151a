import BLIPPeerHarness
import BLIPWire
import Foundation
import Testing

/// Seeded random sessions between two engines (BLIPSessionSimulation), 10 000 of them, in shards. A failure
/// names its seed; replay it alone with `BLIP_SIMULATION_SEED=<seed> swift test --filter SimulationTests`.
/// `BLIP_SIMULATION_SESSIONS=<n>` runs fewer (the sanitizer runs in CI do: the engine has no threads of its
/// own for them to check).
@Suite("Seeded peer-to-peer sessions")
struct SimulationTests {
    static let sessionCount =
        ProcessInfo.processInfo.environment["BLIP_SIMULATION_SESSIONS"].flatMap(Int.init) ?? 10_000
    /// Every shard's sessions run on the simulations' queue (SimulationQueue), one shard after another.
    static let shardCount = 40

    @Test("every session keeps every invariant", arguments: 0..<shardCount)
    func sessions(shard: Int) async {
        if let replay = ProcessInfo.processInfo.environment["BLIP_SIMULATION_SEED"].flatMap(UInt64.init) {
            guard shard == 0 else { return }
            var options = BLIPSessionSimulation.Options(seed: replay)
            options.trace = ProcessInfo.processInfo.environment["BLIP_SIMULATION_TRACE"] != nil
            let report = BLIPSessionSimulation.run(options)
            print(report)
            #expect(report.violations.isEmpty, "\(report)")
            return
        }
        let perShard = max(1, Self.sessionCount / Self.shardCount)
        let seeds = (shard * perShard)..<((shard + 1) * perShard)
        let failures = await SimulationQueue.run {
            var failures: [String] = []
            for seed in seeds {
                let report = BLIPSessionSimulation.run(.init(seed: UInt64(seed)))
                if !report.violations.isEmpty {
                    failures.append("replay with BLIP_SIMULATION_SEED=\(seed): \(report)")
                }
            }
            return failures
        }
        // Recorded here, in the test's task: Swift Testing attributes an issue to the test running it.
        for failure in failures {
            Issue.record(Comment(rawValue: failure))
        }
    }
}
