import BLIPEngine
import BLIPWire
import NIOCore
import Testing

/// The engine reads the clock only where it measures a round trip: for a frame that waits for an ACK,
/// and for an ACK that arrives. A small message costs no clock read on either side.
@Suite("Clock reads")
struct ClockReadTests {
    /// Hands out deadlines one millisecond apart and counts how many were asked for.
    final class CountingClock {
        private(set) var reads = 0
        private let start = NIODeadline.now()

        func now() -> NIODeadline {
            self.reads += 1
            return self.start + .milliseconds(Int64(self.reads))
        }
    }

    @Test("a one-frame request and its reply read no clock, on either side", arguments: BLIPDialect.allCases)
    func smallMessagesReadNoClock(dialect: BLIPDialect) throws {
        let client = BLIPConnectionEngine(configuration: BLIPEngineConfiguration(dialect: dialect))
        let server = BLIPConnectionEngine(configuration: BLIPEngineConfiguration(dialect: dialect))
        let clock = CountingClock()
        _ = try client.enqueue(request(body: bytes(100)))
        var frame = ByteBuffer()
        guard case .frame = try client.nextFrame(into: &frame, now: clock.now()) else {
            Issue.record("no request frame")
            return
        }
        let received = try server.receive(frame, now: clock.now())
        guard case .messageStarted(let message)? = received.event, message.isComplete else {
            Issue.record("request not complete: \(String(describing: received.event))")
            return
        }
        _ = try server.enqueue(BLIPOutgoingMessage(.response(toRequest: message.id.number), properties: [:]))
        frame.clear()
        guard case .frame = try server.nextFrame(into: &frame, now: clock.now()) else {
            Issue.record("no reply frame")
            return
        }
        _ = try client.receive(frame, now: clock.now())
        #expect(clock.reads == 0)
    }

    @Test("a frame that waits for an ACK reads the clock when it leaves, and the ACK when it arrives")
    func framesAwaitingACKsReadTheClock() throws {
        let client = BLIPConnectionEngine(configuration: BLIPEngineConfiguration(dialect: .blip3))
        let server = BLIPConnectionEngine(configuration: BLIPEngineConfiguration(dialect: .blip3))
        let clock = CountingClock()
        _ = try client.enqueue(request(body: bytes(200_000)))
        var framesWithMoreToCome = 0
        var acksReceived = 0
        var frame = ByteBuffer()
        var ack = ByteBuffer()
        for _ in 0..<1_000 {
            frame.clear()
            guard case .frame(let sent) = try client.nextFrame(into: &frame, now: clock.now()) else { break }
            if sent.header.flags.contains(.moreComing) { framesWithMoreToCome += 1 }
            _ = try server.receive(frame, now: clock.now())
            ack.clear()
            while case .frame = try server.nextFrame(into: &ack, now: clock.now()) {
                _ = try client.receive(ack, now: clock.now())
                acksReceived += 1
                ack.clear()
            }
        }
        #expect(framesWithMoreToCome > 0)
        #expect(acksReceived > 0)
        #expect(clock.reads == framesWithMoreToCome + acksReceived)
    }
}
