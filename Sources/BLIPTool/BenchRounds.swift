internal import Foundation

/// `--rounds` and `--via`: a workload measured several times and reported as the median round, so that
/// one slow round on a busy machine does not decide the figure; with `--via`, each round also goes through
/// a relay in front of the same server (`blip proxy`), and that route's median is given as a ratio to
/// direct's from the same run. The routes take turns (direct first in odd rounds, the relay first in even
/// ones), so that a machine that slows down or speeds up during the run weighs on both alike.
extension BenchRunner {
    /// Which way a round went.
    enum Route: String {
        case direct
        case via
    }

    /// The median rounds of each route, as `report` prints them: direct's, then the relay's with its ratio
    /// to direct's.
    @discardableResult
    func reportRounds(_ measure: (BenchRunner) async throws -> BenchResult) async throws -> [BenchResult] {
        let summaries = try await self.measureRounds(measure)
        for summary in summaries { self.report(summary) }
        return summaries
    }

    func measureRounds(_ measure: (BenchRunner) async throws -> BenchResult) async throws -> [BenchResult] {
        let relay = self.options.via.map { BenchRunner(url: $0, options: self.options) }
        var direct: [BenchResult] = []
        var relayed: [BenchResult] = []
        for round in 0..<self.options.roundCount {
            guard let relay else {
                direct.append(try await measure(self))
                continue
            }
            if round % 2 == 0 {
                direct.append(try await measure(self))
                relayed.append(try await measure(relay))
            } else {
                relayed.append(try await measure(relay))
                direct.append(try await measure(self))
            }
        }
        // A route is named only when there are two.
        guard let directSummary = Self.median(of: direct, route: relay == nil ? nil : .direct) else { return [] }
        guard relay != nil, var relaySummary = Self.median(of: relayed, route: .via) else { return [directSummary] }
        if let directFigure = directSummary.figure, directFigure > 0, let relayFigure = relaySummary.figure {
            relaySummary.directRatio = relayFigure / directFigure
        }
        return [directSummary, relaySummary]
    }

    /// The round with the median figure (for an even count, the lower of the two middle ones: a figure that
    /// was measured, not an average of two), with the number of rounds and the lowest and highest figure.
    static func median(of rounds: [BenchResult], route: Route?) -> BenchResult? {
        let sorted = rounds.filter { $0.figure != nil }.sorted { $0.figure! < $1.figure! }
        guard var median = sorted.isEmpty ? nil : sorted[(sorted.count - 1) / 2] else { return nil }
        if let route { median.extra["route"] = route.rawValue }
        median.extra["rounds"] = sorted.count
        median.extra["low"] = Self.rounded(sorted.first!.figure!)
        median.extra["high"] = Self.rounded(sorted.last!.figure!)
        return median
    }

    /// Rates to whole messages, throughputs to a tenth of a MiB/s.
    private static func rounded(_ figure: Double) -> Double {
        figure >= 10_000 ? figure.rounded() : (figure * 10).rounded() / 10
    }
}

extension BenchResult {
    /// What a round is ranked by: messages per second, or MiB per second for a transfer.
    var figure: Double? { self.messagesPerSecond ?? self.mibPerSecond }
}

extension BenchCommand {
    /// How many rounds each workload runs: `--rounds`, or 5 with `--via` and 1 without.
    var roundCount: Int { self.rounds ?? (self.via == nil ? 1 : 5) }

    /// Whether the workloads run in rounds (reported as medians) rather than once.
    var runsRounds: Bool { self.via != nil || self.roundCount > 1 }
}
