package import BLIPEngine
internal import DequeModule
package import NIOCore

/// Two engines back to back over an in-memory link with a virtual clock, under the test's full control:
/// frames can be delivered whole or one at a time, held in one direction, delayed, or the link cut at
/// any frame. Deterministic: nothing happens unless the test calls for it.
///
/// ```swift
/// let link = BLIPPeerLink(configuration: BLIPEngineConfiguration(dialect: .blip3))
/// let (id, _) = try link.client.enqueue(BLIPOutgoingMessage(.request, properties: ["Profile": "echo"]))
/// try link.write(from: .client)
/// let results = link.deliver(from: .client)   // the server's engine events
/// ```
package final class BLIPPeerLink {
    package enum Side: Hashable, Sendable, CaseIterable, CustomStringConvertible {
        case client
        case server

        package var other: Side { self == .client ? .server : .client }
        package var description: String { self == .client ? "client" : "server" }
    }

    /// What delivering one frame did at the receiving side.
    package enum Delivery: Sendable {
        case received(BLIPReceiveResult)
        /// The receiving engine found a fatal protocol error; the link is cut.
        case failed(BLIPEngineError)
    }

    package let client: BLIPConnectionEngine
    package let server: BLIPConnectionEngine
    /// The virtual clock the engines are given.
    package private(set) var now = NIODeadline.uptimeNanoseconds(1_000_000_000)
    /// How long a frame takes to reach the other side.
    package var oneWayDelay = TimeAmount.zero
    /// Directions whose frames stay on the wire until released.
    package var held: Set<Side> = []
    package private(set) var isCut = false
    /// Every frame each side has written, in order.
    package private(set) var sentFrames: [Side: [BLIPSentFrame]] = [.client: [], .server: []]
    /// Frames delivered so far, both directions.
    package private(set) var deliveredCount = 0

    private var wire: [Side: Deque<(frame: ByteBuffer, arrival: NIODeadline)>] = [.client: [], .server: []]

    package init(client: BLIPEngineConfiguration, server: BLIPEngineConfiguration) {
        self.client = BLIPConnectionEngine(configuration: client)
        self.server = BLIPConnectionEngine(configuration: server)
    }

    package convenience init(configuration: BLIPEngineConfiguration = BLIPEngineConfiguration()) {
        self.init(client: configuration, server: configuration)
    }

    package func engine(_ side: Side) -> BLIPConnectionEngine {
        side == .client ? self.client : self.server
    }

    /// Frames written by `side` and not yet delivered.
    package func framesInFlight(from side: Side) -> Int {
        self.wire[side]!.count
    }

    /// Pulls up to `limit` frames from `side`'s engine onto the wire (as a writer does while the socket
    /// is writable). Nothing is written once the link is cut.
    @discardableResult
    package func write(from side: Side, limit: Int = .max) throws(BLIPEngineError) -> [BLIPSentFrame] {
        var written: [BLIPSentFrame] = []
        while !self.isCut && written.count < limit {
            var buffer = ByteBuffer()
            guard case .frame(let frame) = try self.engine(side).nextFrame(into: &buffer, now: self.now) else { break }
            self.wire[side]!.append((buffer, self.now + self.oneWayDelay))
            self.sentFrames[side]!.append(frame)
            written.append(frame)
        }
        return written
    }

    /// Delivers up to `limit` frames written by `side` to the other side, oldest first, if their delay
    /// has passed and the direction is not held. A fatal error at the receiver cuts the link.
    package func deliver(from side: Side, limit: Int = .max) -> [Delivery] {
        var deliveries: [Delivery] = []
        let receiver = self.engine(side.other)
        while !self.isCut, !self.held.contains(side), deliveries.count < limit,
            let next = self.wire[side]!.first, next.arrival <= self.now
        {
            self.wire[side]!.removeFirst()
            self.deliveredCount += 1
            do {
                deliveries.append(.received(try receiver.receive(next.frame, now: self.now)))
            } catch {
                deliveries.append(.failed(error))
                self.isCut = true
            }
        }
        return deliveries
    }

    /// Moves the virtual clock forward.
    package func advance(by amount: TimeAmount) {
        self.now = self.now + amount
    }

    /// The time at which the oldest frame from `side` arrives, if any is in flight.
    package func nextArrival(from side: Side) -> NIODeadline? {
        self.wire[side]!.first?.arrival
    }

    /// Cuts the link: frames in flight are lost and nothing more is written or delivered. The engines
    /// are not closed; the test closes them (as each side's transport would report the loss).
    package func cut() {
        self.isCut = true
        self.wire[.client]!.removeAll()
        self.wire[.server]!.removeAll()
    }
}
