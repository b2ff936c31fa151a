import BLIPPeerHarness
import BLIPWire
import Foundation
import Testing

/// Seeded random sessions between two engines (BLIPSessionSimulation), 10 000 of them, in shards that
/// Swift Testing runs in parallel. A failure names its seed; replay it alone with
/// `BLIP_SIMULATION_SEED=<seed> swift test --filter SimulationTests`. `BLIP_SIMULATION_SESSIONS=<n>` runs
/// fewer (the sanitizer runs in CI do: the engine has no threads of its own for them to check).
@Suite("Seeded peer-to-peer sessions")
struct SimulationTests {
    static let sessionCount =
        ProcessInfo.processInfo.environment["BLIP_SIMULATION_SESSIONS"].flatMap(Int.init) ?? 10_000
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
        for seed in (shard * perShard)..<((shard + 1) * perShard) {
            let report = BLIPSessionSimulation.run(.init(seed: UInt64(seed)))
            if !report.violations.isEmpty {
                Issue.record("replay with BLIP_SIMULATION_SEED=\(seed): \(report)")
            }
            // Let other tests' tasks run: a shard would otherwise hold a thread of the pool for seconds.
            await Task.yield()
        }
    }
}
