import BLIPPeerHarness
import Foundation
import Testing

/// Seeded sessions of stepped connection pairs (BLIPPeerHarness's ConnectionPairSimulation): the
/// production rules of two whole connections, with no tasks and no I/O, so that every interleaving of
/// sends, frame moves, handler ends, cancels, drains and closes is chosen by the seed and replays exactly.
/// Invariants are checked after every step (see ConnectionPairSimulation). `BLIP_PAIR_SESSIONS` sets the
/// number of sessions (default 10 000); `BLIP_PAIR_FIRST_SEED` the first seed, to replay a failure.
@Suite("Seeded sessions of stepped connection pairs", .timeLimit(.minutes(10)))
struct ConnectionPairSimulationTests {
    static let sessions = Int(ProcessInfo.processInfo.environment["BLIP_PAIR_SESSIONS"] ?? "") ?? 10_000
    static let firstSeed = UInt64(ProcessInfo.processInfo.environment["BLIP_PAIR_FIRST_SEED"] ?? "") ?? 1

    /// What a run of sessions found.
    struct Outcome: Sendable {
        var failures: [String] = []
        var endings: [String: Int] = [:]
        var totals = ConnectionPairSimulation.Report()

        mutating func add(_ other: Outcome) {
            self.failures += other.failures
            self.endings.merge(other.endings, uniquingKeysWith: +)
            self.totals.add(other.totals)
        }

        static func run(seeds: Range<UInt64>) -> Outcome {
            var outcome = Outcome()
            for seed in seeds {
                let report = ConnectionPairSimulation.run(seed: seed)
                if !report.violations.isEmpty { outcome.failures.append("seed \(seed): \(report)") }
                var one = Outcome()
                one.endings[report.ending] = 1
                one.totals = report
                outcome.add(one)
            }
            return outcome
        }
    }

    @Test("every session keeps the invariants, and the sessions reach every ending")
    func sessions() async {
        // In chunks on the simulations' queue (SimulationQueue): never a thread of the cooperative pool,
        // and the engine's seeded sessions take turns with these.
        var outcome = Outcome()
        let end = Self.firstSeed + UInt64(Self.sessions)
        var next = Self.firstSeed
        while next < end && outcome.failures.count < 5 {
            let seeds = next..<min(end, next + 500)
            outcome.add(await SimulationQueue.run { Outcome.run(seeds: seeds) })
            next = seeds.upperBound
        }
        let (failures, endings, totals) = (outcome.failures.prefix(5), outcome.endings, outcome.totals)
        #expect(failures.isEmpty, "\(failures.joined(separator: "\n"))")
        print(
            "stepped pairs: \(Self.sessions) sessions, endings \(endings.sorted { $0.key < $1.key }), totals: \(totals)"
        )
        guard Self.sessions >= 1_000 else { return }
        // Every kind of ending, and the rules under test, were reached.
        for ending in ["settled", "closed by client", "closed by server", "link cut"] {
            #expect(endings[ending, default: 0] > 0, "no session ended \(ending)")
        }
        #expect(totals.cancelled > 0)
        #expect(totals.readPauses > 0)
        #expect(totals.busyRefusals > 0)
        #expect(totals.connectionErrors > 0)
        #expect(totals.gracefulCloses > 0)
        #expect(totals.streamedWhole > 0)
    }
}

extension ConnectionPairSimulationTests {
    @Test("trace one seed", .enabled(if: ProcessInfo.processInfo.environment["BLIP_PAIR_TRACE"] != nil))
    func traceOne() {
        let seed = UInt64(ProcessInfo.processInfo.environment["BLIP_PAIR_TRACE"] ?? "") ?? 1
        print(ConnectionPairSimulation.run(seed: seed, trace: true))
    }
}
