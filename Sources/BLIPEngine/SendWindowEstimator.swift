internal import NIOCore

/// The send window of a connection: how many unacknowledged bytes one message may have in flight.
///
/// A fixed 128 000-byte window caps one message at window / round trip (1.8 MiB/s over a 50 ms round
/// trip). The adaptive window starts there and is steered by the measured round trip (a frame's send to
/// the ACK covering it), like a delay-based TCP congestion control:
/// - while the round trip stays near its minimum, the link is not queueing: the window grows by the bytes
///   each ACK acknowledges (doubling per round trip, as in slow start) when the window held the message
///   back;
/// - once the round trip shows queueing, the window shrinks, at most once per round trip, in proportion
///   to the excess (to acceptable / measured round trip, halving at most), down to its initial size.
///   Bytes queued in socket buffers delay everything behind them, urgent messages included, so a window
///   larger than the link needs costs latency and buys no throughput.
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

    /// Round trips up to 2 x minimum + this count as uncongested (absorbs scheduling noise on loopback).
    static let growthSlack = TimeAmount.microseconds(250)
    /// Round trips above 2 x minimum + this count as queueing.
    static let shrinkSlack = TimeAmount.milliseconds(1)

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
        let acceptable = 2 * minimum.nanoseconds + Self.growthSlack.nanoseconds
        if roundTrip.nanoseconds <= acceptable {
            if wasWindowLimited { self.size = min(self.maximum, self.size + bytes) }
        } else if roundTrip.nanoseconds > 2 * minimum.nanoseconds + Self.shrinkSlack.nanoseconds,
            now >= self.nextDecrease
        {
            let factor = max(0.5, Double(acceptable) / Double(roundTrip.nanoseconds))
            self.size = max(self.initial, Int(Double(self.size) * factor))
            self.nextDecrease = now + roundTrip
        }
    }
}
