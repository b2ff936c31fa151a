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

    @Test("every session keeps the invariants, and the sessions reach every ending")
    func sessions() {
        var endings: [String: Int] = [:]
        var totals = ConnectionPairSimulation.Report()
        var failures: [String] = []
        for seed in Self.firstSeed..<(Self.firstSeed + UInt64(Self.sessions)) {
            let report = ConnectionPairSimulation.run(seed: seed)
            if !report.violations.isEmpty {
                failures.append("seed \(seed): \(report)")
                if failures.count >= 5 { break }
            }
            endings[report.ending, default: 0] += 1
            totals.requests += report.requests
            totals.replies += report.replies
            totals.errorReplies += report.errorReplies
            totals.connectionErrors += report.connectionErrors
            totals.cancelled += report.cancelled
            totals.readPauses += report.readPauses
            totals.busyRefusals += report.busyRefusals
            totals.framesMoved += report.framesMoved
            totals.gracefulCloses += report.gracefulCloses
            totals.streamedWhole += report.streamedWhole
        }
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
