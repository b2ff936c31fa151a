internal import NIOCore

/// The send window of a connection: how many unacknowledged bytes one message may have in flight.
///
/// A fixed 128 000-byte window caps one message at window / round trip (1.8 MiB/s over a 50 ms round
/// trip). The adaptive window starts there and, like TCP slow start, grows by the bytes each ACK
/// acknowledges while the message was held back by the window, doubling per round trip, as long as the
/// measured round trip (a frame's send to the ACK covering it) stays within twice its minimum plus a
/// few milliseconds: growth stops once data starts queueing instead of flowing.
struct SendWindowEstimator {
    private let isAdaptive: Bool
    private let maximum: Int
    private(set) var size: Int
    private(set) var minimumRoundTrip: TimeAmount?
    private(set) var lastRoundTrip: TimeAmount?

    /// Round trips up to 2 x minimum + this count as uncongested (absorbs scheduling noise on loopback).
    static let roundTripSlack = TimeAmount.milliseconds(5)

    init(_ window: BLIPEngineConfiguration.SendWindow) {
        switch window {
        case .fixed(let size):
            self.isAdaptive = false
            self.size = size
            self.maximum = size
        case .adaptive(let initial, let maximum):
            self.isAdaptive = true
            self.size = initial
            self.maximum = max(initial, maximum)
        }
    }

    mutating func acknowledged(bytes: Int, roundTrip: TimeAmount?, wasWindowLimited: Bool) {
        if let roundTrip {
            self.lastRoundTrip = roundTrip
            self.minimumRoundTrip = min(self.minimumRoundTrip ?? roundTrip, roundTrip)
        }
        guard self.isAdaptive, wasWindowLimited, bytes > 0, let roundTrip, let minimum = self.minimumRoundTrip else {
            return
        }
        let uncongested = roundTrip.nanoseconds <= 2 * minimum.nanoseconds + Self.roundTripSlack.nanoseconds
        if uncongested {
            self.size = min(self.maximum, self.size + bytes)
        }
    }
}
