import NIOCore
import Testing

@testable import BLIPEngine

/// The adaptive window's thresholds: the queueing it tolerates is latency every message behind a bulk
/// one waits for, urgent ones included.
@Suite("Adaptive send window thresholds")
struct SendWindowEstimatorTests {
    /// A window that measured a 200 µs minimum round trip on its first ACK.
    private func estimator(at now: NIODeadline) -> SendWindowEstimator {
        var window = SendWindowEstimator(.adaptive(initial: 128_000, maximum: 4 << 20))
        window.acknowledged(bytes: 50_000, roundTrip: .microseconds(200), wasWindowLimited: true, now: now)
        return window
    }

    @Test("it grows while the round trip stays within 1.5 x its minimum + 100 µs")
    func growsNearMinimum() {
        let now = NIODeadline.uptimeNanoseconds(1_000_000_000)
        var window = self.estimator(at: now)
        let start = window.size
        window.acknowledged(bytes: 50_000, roundTrip: .microseconds(400), wasWindowLimited: true, now: now)
        #expect(window.size == start + 50_000)
        window.acknowledged(bytes: 50_000, roundTrip: .microseconds(400), wasWindowLimited: false, now: now)
        #expect(window.size == start + 50_000, "a message the window did not hold back does not grow it")
    }

    /// 450 µs is 250 µs of queueing on a 200 µs link: enough bytes in flight to hold an urgent request for
    /// longer than the round trip itself. The window stops growing there but does not shrink yet.
    @Test("it stops growing past 1.5 x the minimum + 100 µs")
    func holdsWhenQueueingBegins() {
        let now = NIODeadline.uptimeNanoseconds(1_000_000_000)
        var window = self.estimator(at: now)
        let start = window.size
        for _ in 0..<10 {
            window.acknowledged(bytes: 50_000, roundTrip: .microseconds(450), wasWindowLimited: true, now: now)
        }
        #expect(window.size == start)
    }

    @Test("it shrinks once the round trip passes 1.5 x the minimum + 500 µs, at most once per round trip")
    func shrinksUnderQueueing() {
        var now = NIODeadline.uptimeNanoseconds(1_000_000_000)
        var window = self.estimator(at: now)
        for _ in 0..<40 {
            window.acknowledged(bytes: 50_000, roundTrip: .microseconds(200), wasWindowLimited: true, now: now)
        }
        let grown = window.size
        #expect(grown >= 2_000_000)
        window.acknowledged(bytes: 50_000, roundTrip: .microseconds(750), wasWindowLimited: true, now: now)
        #expect(window.size == grown, "750 µs is still within 800 µs")
        window.acknowledged(bytes: 50_000, roundTrip: .microseconds(900), wasWindowLimited: true, now: now)
        let shrunk = window.size
        #expect(shrunk < grown && shrunk >= grown / 2)
        window.acknowledged(bytes: 50_000, roundTrip: .microseconds(900), wasWindowLimited: true, now: now)
        #expect(window.size == shrunk, "no second decrease within the round trip")
        now = now + .microseconds(900)
        window.acknowledged(bytes: 50_000, roundTrip: .microseconds(900), wasWindowLimited: true, now: now)
        #expect(window.size < shrunk)
    }

    @Test("a 50 ms link still grows: the tolerance scales with the minimum")
    func longRoundTripGrows() {
        let now = NIODeadline.uptimeNanoseconds(1_000_000_000)
        var window = SendWindowEstimator(.adaptive(initial: 128_000, maximum: 4 << 20))
        window.acknowledged(bytes: 50_000, roundTrip: .milliseconds(50), wasWindowLimited: true, now: now)
        let start = window.size
        window.acknowledged(bytes: 50_000, roundTrip: .milliseconds(70), wasWindowLimited: true, now: now)
        #expect(window.size == start + 50_000, "20 ms of jitter on a 50 ms link is not queueing")
    }

    @Test("a fixed window never moves")
    func fixedWindow() {
        let now = NIODeadline.uptimeNanoseconds(1_000_000_000)
        var window = SendWindowEstimator(.fixed(128_000))
        window.acknowledged(bytes: 50_000, roundTrip: .microseconds(100), wasWindowLimited: true, now: now)
        window.acknowledged(bytes: 50_000, roundTrip: .milliseconds(30), wasWindowLimited: true, now: now)
        #expect(window.size == 128_000)
    }
}
