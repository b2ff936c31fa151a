internal import NIOCore

/// The send window of a connection: how many unacknowledged bytes one message may have in flight.
///
/// A fixed 128 000-byte window caps one message at window / round trip (1.8 MiB/s over a 50 ms round
/// trip). The adaptive window starts there and is steered by the measured round trip (a frame's send to
/// the ACK covering it), like a delay-based TCP congestion control:
/// - while the round trip stays within 1.5 x its minimum + 100 µs, the link is not queueing: the window
///   grows by the bytes each ACK acknowledges (doubling per round trip, as in slow start) when the window
///   held the message back;
/// - once the round trip passes 1.5 x its minimum + 500 µs, the link is queueing: the window shrinks, at
///   most once per round trip, in proportion to the excess (to acceptable / measured round trip, halving
///   at most), down to its initial size.
///
/// Bytes queued in socket buffers delay everything behind them, urgent messages included: an urgent
/// request waits for the bulk bytes already in flight, so the queueing the window tolerates is latency it
/// adds (the urgent workload in Docs/Benchmarks.md measures it).
struct SendWindowEstimator {
    private let isAdaptive: Bool
    private let initial: Int
    private let maximum: Int
    private(set) var size: Int {
        didSet { self.peak = max(self.peak, self.size) }
    }
    /// The largest window so far: data sent under it may still be in flight after the window shrank.
    private(set) var peak: Int
    private(set) var minimumRoundTrip: TimeAmount?
    private(set) var lastRoundTrip: TimeAmount?
    /// No shrinking before this: ACKs within one round trip of a decrease still reflect the old window.
    private var nextDecrease: NIODeadline = .distantPast

    /// Round trips up to 1.5 x minimum + this count as uncongested (absorbs scheduling noise on loopback).
    static let growthSlack = TimeAmount.microseconds(100)
    /// Round trips above 1.5 x minimum + this count as queueing.
    static let shrinkSlack = TimeAmount.microseconds(500)

    init(_ window: BLIPEngineConfiguration.SendWindow) {
        switch window {
        case .fixed(let size):
            self.isAdaptive = false
            self.size = size
            self.peak = size
            self.initial = size
            self.maximum = size
        case .adaptive(let initial, let maximum):
            self.isAdaptive = true
            self.size = initial
            self.peak = initial
            self.initial = initial
            self.maximum = max(initial, maximum)
        }
    }

    mutating func acknowledged(bytes: Int, roundTrip: TimeAmount?, wasWindowLimited: Bool, now: NIODeadline) {
        if let roundTrip {
            self.lastRoundTrip = roundTrip
            self.minimumRoundTrip = min(self.minimumRoundTrip ?? roundTrip, roundTrip)
        }
        guard self.isAdaptive, bytes > 0, let roundTrip, let minimum = self.minimumRoundTrip else { return }
        let base = minimum.nanoseconds + minimum.nanoseconds / 2
        let acceptable = base + Self.growthSlack.nanoseconds
        if roundTrip.nanoseconds <= acceptable {
            if wasWindowLimited { self.size = min(self.maximum, self.size + bytes) }
        } else if roundTrip.nanoseconds > base + Self.shrinkSlack.nanoseconds,
            now >= self.nextDecrease
        {
            let factor = max(0.5, Double(acceptable) / Double(roundTrip.nanoseconds))
            self.size = max(self.initial, Int(Double(self.size) * factor))
            self.nextDecrease = now + roundTrip
        }
    }
}
