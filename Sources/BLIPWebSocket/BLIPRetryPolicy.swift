/// When a ``BLIPSession`` connects again after a transient failure: exponential backoff with full jitter.
///
/// The n-th consecutive failure waits a random time between zero and `min(maximumDelay, initialDelay ×
/// multiplierⁿ⁻¹)` (full jitter: many clients cut off together do not come back together), or at least as
/// long as the server's `Retry-After` asked. A connection that was established resets the count.
public struct BLIPRetryPolicy: Sendable, Hashable {
    public var initialDelay: Duration
    public var multiplier: Double
    public var maximumDelay: Duration
    /// Wait a random time up to the backoff instead of the backoff itself.
    public var usesFullJitter: Bool
    /// Consecutive failed attempts after which the session gives up; nil never gives up.
    public var maximumAttempts: Int?

    public init(
        initialDelay: Duration = .seconds(1),
        multiplier: Double = 2,
        maximumDelay: Duration = .seconds(300),
        usesFullJitter: Bool = true,
        maximumAttempts: Int? = nil
    ) {
        self.initialDelay = initialDelay
        self.multiplier = multiplier
        self.maximumDelay = maximumDelay
        self.usesFullJitter = usesFullJitter
        self.maximumAttempts = maximumAttempts
    }

    /// Couchbase Lite's single-shot replicator: ten attempts, waits up to five minutes.
    public static let singleShot = BLIPRetryPolicy(maximumAttempts: 10)
    /// Couchbase Lite's continuous replicator: never gives up, waits up to five minutes.
    public static let continuous = BLIPRetryPolicy()

    /// The backoff before attempt `failures + 1`, after `failures` (at least 1) consecutive failures,
    /// before jitter.
    public func backoff(afterFailures failures: Int) -> Duration {
        let exponent = Double(max(0, failures - 1))
        let seconds = Self.seconds(self.initialDelay) * pow(self.multiplier, exponent)
        let capped = min(seconds, Self.seconds(self.maximumDelay))
        return .nanoseconds(Int64((capped.isFinite ? capped : Self.seconds(self.maximumDelay)) * 1e9))
    }

    /// The wait after `failures` consecutive failures: the backoff, jittered, but never shorter than
    /// `retryAfter` (what the server asked).
    public func delay<Generator: RandomNumberGenerator>(
        afterFailures failures: Int,
        retryAfter: Duration? = nil,
        using generator: inout Generator
    ) -> Duration {
        var delay = self.backoff(afterFailures: failures)
        if self.usesFullJitter {
            let nanoseconds = Int64(Self.seconds(delay) * 1e9)
            delay = .nanoseconds(nanoseconds > 0 ? Int64.random(in: 0...nanoseconds, using: &generator) : 0)
        }
        if let retryAfter, retryAfter > delay { delay = min(retryAfter, .seconds(3_600)) }
        return delay
    }

    static func seconds(_ duration: Duration) -> Double {
        let (seconds, attoseconds) = duration.components
        return Double(seconds) + Double(attoseconds) / 1e18
    }
}

private func pow(_ base: Double, _ exponent: Double) -> Double {
    var result = 1.0
    var remaining = Int(exponent)
    while remaining > 0 && result < 1e12 {
        result *= base
        remaining -= 1
    }
    return result
}
