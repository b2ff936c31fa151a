public import BLIPWire
internal import DequeModule
internal import Dispatch
internal import NIOConcurrencyHelpers
internal import NIOCore

/// Two connected in-process transports, for testing handlers and clients without sockets.
///
/// Each end runs on its own serial queue, as a socket's event loop would; frames cross in order, at most
/// ``framesInFlight`` at a time per direction (the writer stops pulling while the other end is behind, as
/// on a full socket). ``cut()`` drops the link abruptly, like a reset connection.
///
/// ```swift
/// let (client, server) = BLIPInMemoryTransport.makePair()
/// let serverConnection = BLIPConnection(transport: server, router: router)
/// Task { await serverConnection.run() }
/// try await withBLIPConnection(over: client) { connection in
///     let reply = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "hi"))
/// }
/// ```
public final class BLIPInMemoryTransport: BLIPTransport {
    public let dialect: BLIPDialect
    let link: InMemoryLink
    private let side: Int

    /// Frames one end may have sent and the other not yet taken.
    public static let framesInFlight = 16

    private init(link: InMemoryLink, side: Int) {
        self.link = link
        self.side = side
        self.dialect = link.dialect
    }

    /// A connected pair: what one writes, the other receives.
    public static func makePair(dialect: BLIPDialect = .blip3) -> (
        client: BLIPInMemoryTransport, server: BLIPInMemoryTransport
    ) {
        let link = InMemoryLink(dialect: dialect)
        return (BLIPInMemoryTransport(link: link, side: 0), BLIPInMemoryTransport(link: link, side: 1))
    }

    public func start(_ sink: BLIPTransportSink) {
        self.link.start(self.side, sink)
    }

    public func wakeWriter() {
        self.link.schedulePump(self.side)
    }

    public func pauseReading() {
        self.link.setPaused(self.side, true)
    }

    public func resumeReading() {
        self.link.setPaused(self.side, false)
    }

    public func close(_ reason: BLIPCloseReason) {
        self.link.close(from: self.side, reason)
    }

    /// Drops the link at once in both directions, like a TCP reset: frames in flight are lost and both
    /// ends report a transport failure.
    public func cut() {
        self.link.cut()
    }
}

/// The shared state of a pair. Each end's sink is only called on that end's queue.
///
/// Work for an end is a set of flags on a Dispatch user-data source that targets its queue: setting a flag
/// allocates nothing, where a block per hop cost two or three allocations (about 11 per round trip), and
/// flags set before a run are all seen by that run, in one fixed order (deliver, write, close).
final class InMemoryLink: Sendable {
    struct End {
        var sink: BLIPTransportSink?
        var inbox: Deque<ByteBuffer> = []
        var readingPaused = false
        var closed = false
        var deliveryScheduled = false
        var pumpScheduled = false
        /// Delivering on this end's queue: a pump asked for meanwhile runs when the delivery ends, on the
        /// same queue, rather than as a run of its own.
        var delivering = false
        /// The last pump stopped at a full inbox on the other end: that end's next delivery resumes it.
        var waitingForRoom = false
        /// A close this end asked for, done on its queue after what was scheduled before it.
        var pendingClose: BLIPCloseReason?
        /// An empty frame buffer the last pump did not use.
        var spareFrame: ByteBuffer?
        /// Why the peer closed, reported once the inbox is drained.
        var peerClosed: BLIPCloseStatus?
        /// How this end closed before its connection started (no sink to tell): told at `start`.
        var unreportedClose: BLIPCloseStatus?
    }

    /// The flags of an end's work source.
    private enum Work {
        static let deliver: UInt = 1
        static let pump: UInt = 2
        static let close: UInt = 4
    }

    let dialect: BLIPDialect
    /// Room for a small message's frame in one allocation: a buffer that grows while the frame is
    /// written costs a reallocation per step.
    static let initialFrameCapacity = 1024
    static let allocator = ByteBufferAllocator()
    let queues: [DispatchQueue]
    /// Dispatch sources are safe to use from any thread; Linux's Dispatch does not mark them `Sendable`.
    nonisolated(unsafe) private let work: [any DispatchSourceUserDataOr]
    let ends: NIOLockedValueBox<[End]>

    init(dialect: BLIPDialect) {
        self.dialect = dialect
        self.queues = [DispatchQueue(label: "blip.in-memory.client"), DispatchQueue(label: "blip.in-memory.server")]
        self.work = self.queues.map { DispatchSource.makeUserDataOrSource(queue: $0) }
        self.ends = NIOLockedValueBox([End(), End()])
        for side in 0..<2 {
            // Weak: a source's handler lives as long as the source, which this link owns.
            self.work[side].setEventHandler { [weak self] in self?.run(side) }
            self.work[side].activate()
        }
    }

    deinit {
        for source in self.work { source.cancel() }
    }

    private func schedule(_ side: Int, _ flags: UInt) {
        self.work[side].or(data: flags)
    }

    /// On `side`'s queue: the work flagged since the last run.
    private func run(_ side: Int) {
        let flags = self.work[side].data
        if flags & Work.deliver != 0 { self.deliver(side) }
        if flags & Work.pump != 0 { self.pump(side) }
        if flags & Work.close != 0, let reason = self.ends.withLockedValue({ $0[side].pendingClose.take() }) {
            // Every reply still queued goes before the close, whatever room the peer's inbox has (a WebSocket
            // writes them all before its close frame).
            if reason.finishesQueuedReplies { self.pump(side, untilDone: true) }
            self.closeNow(from: side, reason)
        }
    }

    func start(_ side: Int, _ sink: BLIPTransportSink) {
        let closed = self.ends.withLockedValue { ends -> BLIPCloseStatus? in
            ends[side].sink = sink
            return ends[side].unreportedClose.take()
        }
        if let closed {
            self.queues[side].async { sink.closed(closed) }
            return
        }
        self.scheduleDelivery(side)
    }

    func setPaused(_ side: Int, _ paused: Bool) {
        self.ends.withLockedValue { $0[side].readingPaused = paused }
        if !paused { self.scheduleDelivery(side) }
    }

    func schedulePump(_ side: Int) {
        let schedule = self.ends.withLockedValue { ends -> Bool in
            guard !ends[side].pumpScheduled else { return false }
            ends[side].pumpScheduled = true
            return !ends[side].delivering
        }
        if schedule { self.schedule(side, Work.pump) }
    }

    private func scheduleDelivery(_ side: Int) {
        let schedule = self.ends.withLockedValue { ends -> Bool in
            guard !ends[side].deliveryScheduled else { return false }
            ends[side].deliveryScheduled = true
            return true
        }
        if schedule { self.schedule(side, Work.deliver) }
    }

    /// On `side`'s queue: pull frames from its connection while the other end can take them (`untilDone`:
    /// until the connection has none left).
    private func pump(_ side: Int, untilDone: Bool = false) {
        let other = 1 - side
        guard
            let sink = self.ends.withLockedValue({ ends -> BLIPTransportSink? in
                ends[side].pumpScheduled = false
                return ends[side].closed ? nil : ends[side].sink
            })
        else { return }
        var sent = false
        // A buffer that nothing was written into is kept for the next pump: most pumps find nothing to send,
        // and each new buffer costs two allocations.
        var spare = self.ends.withLockedValue { $0[side].spareFrame.take() }
        while self.ends.withLockedValue({ ends in
            guard !ends[side].closed else { return false }
            guard untilDone || ends[other].inbox.count < BLIPInMemoryTransport.framesInFlight else {
                // Set under the lock that saw the inbox full, so that the delivery emptying it sees it.
                ends[side].waitingForRoom = true
                return false
            }
            return true
        }) {
            var frame = spare.take() ?? Self.allocator.buffer(capacity: Self.initialFrameCapacity)
            let pulled = sink.pullFrame(into: &frame)
            guard pulled != .none else {
                spare = frame
                break
            }
            self.ends.withLockedValue { $0[other].inbox.append(frame) }
            sent = true
            if pulled == .lastReadyFrame && !untilDone { break }
        }
        if let spare { self.ends.withLockedValue { $0[side].spareFrame = spare } }
        if sent { self.scheduleDelivery(other) }
    }

    /// On `side`'s queue: hand received frames to its connection, then let it write (replies, ACKs).
    private func deliver(_ side: Int) {
        let other = 1 - side
        var pumpAsked = false
        var roomFreed = false
        while true {
            let next = self.ends.withLockedValue { ends -> (BLIPTransportSink, ByteBuffer)? in
                guard !ends[side].closed, !ends[side].readingPaused, let sink = ends[side].sink,
                    let frame = ends[side].inbox.popFirst()
                else {
                    // Cleared under the same lock that saw nothing to deliver: a frame appended from now on
                    // schedules a new delivery instead of waiting for this one; a pump asked for from now on
                    // schedules its own run.
                    ends[side].deliveryScheduled = false
                    ends[side].delivering = false
                    pumpAsked = ends[side].pumpScheduled
                    return nil
                }
                ends[side].delivering = true
                if ends[other].waitingForRoom {
                    ends[other].waitingForRoom = false
                    roomFreed = true
                }
                return (sink, frame)
            }
            guard let (sink, frame) = next else { break }
            sink.received(frame)
        }
        let (closedByPeer, sink) = self.ends.withLockedValue { ends -> (BLIPCloseStatus?, BLIPTransportSink?) in
            // An end not started yet stays open: its start delivers the close (marked closed with no sink
            // to tell, its connection would never learn of it).
            guard ends[side].inbox.isEmpty, let reason = ends[side].peerClosed, !ends[side].closed,
                ends[side].sink != nil
            else {
                return (nil, nil)
            }
            ends[side].closed = true
            return (reason, ends[side].sink)
        }
        if let closedByPeer {
            sink?.closed(closedByPeer)
            return
        }
        // The connection asks for a pump whenever what it read gives it frames to send (ACKs, replies).
        if pumpAsked { self.pump(side) }
        if roomFreed { self.schedulePump(other) }
    }

    /// Closes `side` on its queue, after sending the replies its connection finishes after a fatal error,
    /// as a WebSocket would before its close frame.
    func close(from side: Int, _ reason: BLIPCloseReason) {
        let schedule = self.ends.withLockedValue { ends -> Bool in
            guard !ends[side].closed, ends[side].pendingClose == nil else { return false }
            ends[side].pendingClose = reason
            return true
        }
        if schedule { self.schedule(side, Work.close) }
    }

    private func closeNow(from side: Int, _ reason: BLIPCloseReason) {
        let other = 1 - side
        let status = BLIPCloseStatus(code: reason.code, reason: reason.reason, initiator: .local)
        let sink = self.ends.withLockedValue { ends -> BLIPTransportSink? in
            guard !ends[side].closed else { return nil }
            ends[side].closed = true
            ends[side].inbox.removeAll()
            if ends[other].peerClosed == nil && !ends[other].closed {
                ends[other].peerClosed = BLIPCloseStatus(code: reason.code, reason: reason.reason, initiator: .peer)
            }
            if ends[side].sink == nil { ends[side].unreportedClose = status }
            return ends[side].sink
        }
        // The peer's delivery is queued before this side learns of its close: what this side's application
        // does next (closing the peer too, say) then comes after the close on the peer's queue, as a close
        // frame on the wire comes before anything sent later.
        self.scheduleDelivery(other)
        sink?.closed(status)
    }

    func cut() {
        let error = BLIPConnectionError(.transportFailed, "the link was cut")
        let status = BLIPCloseStatus(
            code: .abnormalClosure,
            reason: error.message,
            initiator: .transport,
            underlying: error
        )
        let sinks = self.ends.withLockedValue { ends -> [BLIPTransportSink?] in
            (0..<2).map { side in
                guard !ends[side].closed else { return nil }
                ends[side].closed = true
                ends[side].inbox.removeAll()
                if ends[side].sink == nil { ends[side].unreportedClose = status }
                return ends[side].sink
            }
        }
        for (side, sink) in sinks.enumerated() {
            guard let sink else { continue }
            self.queues[side].async { sink.closed(status) }
        }
    }
}
