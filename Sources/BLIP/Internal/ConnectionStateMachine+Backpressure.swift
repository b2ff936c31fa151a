internal import BLIPEngine
internal import NIOConcurrencyHelpers
internal import NIOCore

/// How a connection keeps what a peer can make it hold bounded, without ever stopping in a way that
/// keeps its own handlers from finishing.
///
/// Everything the peer makes us hold counts against ``BLIPConnection/Configuration/incomingBufferBudget``:
/// whole bodies being assembled, requests waiting for or held by a handler (or in the incoming-request
/// buffer), unread pieces of streamed bodies, and property blocks still arriving. Past the budget:
/// - whole bodies still arriving stop being acknowledged, so an honest peer stops at its send window; when
///   nothing else could free memory, one of them is let through (so that one always finishes);
/// - new requests wait (reading pauses) if nothing running waits for the peer, and are refused with ERR
///   BLIP/503 otherwise: a handler that waits for a reply or for the rest of a streamed body must keep
///   seeing what the peer sends.
/// In serial order, requests that wait for an earlier one still arriving (ConnectionStateMachine+SerialOrder) hold
/// memory that only reading frees: reading never pauses for them, the earliest request is the one let
/// through, and a request that expects a reply and would wait behind it is refused with ERR BLIP/503 while
/// the budget is exceeded, so that what waits stays within the budget.
/// Past ``BLIPConnection/Configuration/incomingBufferHardLimit`` the peer is ignoring flow control: the
/// connection closes with 1008.
extension ConnectionStateMachine {
    /// The shared budget is back within its limit.
    mutating func sharedBudgetHasRoom(effects: inout Effects) {
        guard !self.isClosed else { return }
        // The wake took this connection off the waiting list: if the budget is exceeded again by now,
        // the pause must be decided (and waited on) afresh, not taken as already registered.
        self.pausedForSharedBudget = false
        self.relieveWithheld(effects: &effects)
        self.updateReading(effects: &effects)
    }

    /// A fixed cost per buffered message besides its body: its properties, bookkeeping and task.
    static func charge(of message: BLIPIncomingMessage) -> Int {
        var size = 256
        for property in message.properties { size += property.name.utf8.count + property.value.utf8.count + 32 }
        return size + message.body.readableBytes
    }

    /// The budget now: the configured one, or while a shared budget is exceeded, at most this connection's
    /// share of it.
    var budget: Int {
        let own = self.configuration.incomingBufferBudget
        guard let shared = self.configuration.sharedBudget, shared.isExceeded else { return own }
        return min(own, shared.share)
    }

    /// While the shared budget is exceeded, a connection holding more than its share stops reading, even
    /// where that holds its own handlers up (the other connections are what it protects); it is told when
    /// the total is back within the limit, and then goes on by the usual rules. One connection whose bytes
    /// are all of messages still arriving reads on (``SharedBufferBudget/exempt(_:)``): paused, none of
    /// those could ever finish.
    fileprivate mutating func updateSharedBudgetPause(_ shared: SharedBufferBudget, effects: inout Effects) {
        let overShare = self.bufferedBytes() > shared.share
        var pause = shared.isExceeded && overShare
        let id = ObjectIdentifier(self.owner)
        // Over its share with only messages still arriving. The exemption is kept while that lasts (a
        // dip of the total under the limit does not end it), so that it passes on only as messages finish.
        let onlyArriving = overShare && self.releasableBytes() <= 0
        if self.isExemptFromSharedBudget {
            if onlyArriving {
                pause = false
            } else {
                self.isExemptFromSharedBudget = false
                effects.later { shared.endExemption(id) }
            }
        } else if pause && onlyArriving && shared.exempt(id) {
            pause = false
            self.isExemptFromSharedBudget = true
        }
        guard pause != self.pausedForSharedBudget else { return }
        self.pausedForSharedBudget = pause
        guard pause else { return }
        self.statistics.readPausesForSharedBudget += 1
        // Held until woken or closed (closing stops the wait), so a paused connection is never forgotten.
        let owner = self.owner
        effects.later { shared.wait(id) { owner.sharedBudgetHasRoom() } }
    }

    /// The largest body read whole: the message limit, but never more than the budget can hold.
    var wholeBodyLimit: Int {
        min(self.configuration.maximumIncomingMessageSize, self.configuration.incomingBufferBudget)
    }

    func bufferedBytes() -> Int {
        self.buffered + self.engine.bufferedPropertyBytes
    }

    /// Counts `bytes` more held for the peer. Returns false if that took the connection past its hard
    /// limit (it is failing).
    mutating func charge(_ bytes: Int, effects: inout Effects) -> Bool {
        self.buffered += bytes
        self.configuration.sharedBudget?.add(bytes)
        let total = self.bufferedBytes()
        if total > self.statistics.peakBufferedIncomingBytes { self.statistics.peakBufferedIncomingBytes = total }
        return self.checkHardLimit(effects: &effects)
    }

    /// Fails the connection if the peer made it hold more than the hard limit.
    mutating func checkHardLimit(effects: inout Effects) -> Bool {
        let total = self.bufferedBytes()
        guard total > self.configuration.incomingBufferHardLimit else { return true }
        let error = BLIPConnectionError(
            .limitExceeded,
            "the peer made the connection hold \(total) bytes (limit \(self.configuration.incomingBufferHardLimit))"
        )
        self.fatal(error, closeCode: .policyViolation, byPeer: true, effects: &effects)
        return false
    }

    /// `bytes` held for the peer were let go of (a handler finished, a reader read).
    mutating func release(_ bytes: Int, effects: inout Effects) {
        guard !self.isClosed, bytes > 0 else { return }
        self.buffered -= bytes
        if let shared = self.configuration.sharedBudget {
            shared.subtract(bytes)
            if shared.hasWaiters { effects.later { shared.wakeIfRoom() } }
        }
        self.relieveWithheld(effects: &effects)
        self.updateReading(effects: &effects)
    }

    /// A whole message's body bytes arrived: they count as consumed, so ACKs go on, unless the connection
    /// holds more than its budget.
    mutating func consumeOrWithhold(
        _ id: BLIPIncomingID,
        _ assembly: inout Assembly,
        bytes: Int,
        effects: inout Effects
    ) {
        guard bytes > 0 else { return }
        if self.exempt == id || self.bufferedBytes() <= self.budget {
            self.consumed(id, bytes: bytes, effects: &effects)
            return
        }
        assembly.withheld += bytes
        self.withheld.insert(id)
        // Nothing but messages still arriving holds memory: no handler or reader will free any, so let
        // one go on (else nothing could): this one, or in serial order the earliest request, which the
        // others wait for. It counts against the hard limit, which leaves room for it.
        if self.mustLetOneThrough() {
            let chosen = self.messageToLetThrough() ?? id
            self.exempt = chosen
            self.withheld.remove(chosen)
            if chosen == id {
                self.consumed(id, bytes: assembly.withheld, effects: &effects)
                assembly.withheld = 0
            } else {
                self.releaseWithheld(chosen, effects: &effects)
            }
        }
    }

    /// In serial order, past the budget, whether a request still arriving that would wait for an earlier one
    /// is given up (``shed(_:_:effects:)``): it could only add to what reading alone frees, and without flow
    /// control (the seed dialect), or with many messages in flight each within its send window, the peer
    /// would fill the room the earliest request needs to finish. The earliest, the exempt one and no-reply
    /// requests (nothing could tell their sender) are never given up.
    func shedsWaitingRequest(_ id: BLIPIncomingID, _ assembly: Assembly) -> Bool {
        id.isRequest && assembly.message.expectsReply && self.isSerial && self.exempt != id
            && self.waitingRoomIsFull() && self.orderWouldHold(id.number)
    }

    /// In serial order, whether requests that would wait for an earlier one still arriving have filled their
    /// room: the budget, less what the frames in flight may add before the next check. What waits stays
    /// within it, so that the earliest request (up to the whole budget) still finishes under the hard limit
    /// (twice the budget by default).
    func waitingRoomIsFull() -> Bool {
        let budget = self.budget
        return self.bufferedBytes() > budget - min(budget / 4, 64 << 10)
    }

    /// Gives up a request still arriving: its bytes go, the rest of it is drained unread (and acknowledged,
    /// so that it ends soon), and it gets ERR BLIP/503, which the engine holds until its last frame.
    mutating func shed(_ id: BLIPIncomingID, _ assembly: Assembly, effects: inout Effects) {
        self.assemblyEnded(id, assembly)
        self.release(assembly.charge, effects: &effects)
        if self.engine.drain(id) { effects.wakeWriter = true }
        self.statistics.requestsRefusedBusy += 1
        let error = BLIPError(code: .busy, message: "the connection is too busy to take this request")
        self.enqueueReply(error, to: id.number, effects: &effects)
    }

    /// Bytes held that handlers, queues and readers will free without reading more from the peer: not those
    /// of whole messages still arriving, nor of requests waiting in serial order for one that is.
    func releasableBytes() -> Int {
        let releasable = self.buffered - self.assembling
        return self.order.hasReadyItems ? releasable - self.heldForOrder() : releasable
    }

    /// Whether one message whose ACKs are withheld must be let through: nothing held can be freed without
    /// reading more, or something here waits for the peer (a running handler waiting for a reply holds its
    /// slot, and in serial order every request behind it, until that reply has arrived).
    func mustLetOneThrough() -> Bool {
        self.exempt == nil && (self.releasableBytes() == 0 || !self.mayPauseReading())
    }

    /// The message to let through when one must be: a reply read whole that a caller waits for (the
    /// earliest), else in serial order the earliest request if it is still arriving whole (the one that frees
    /// those waiting behind it); nil leaves the choice to the caller.
    fileprivate func messageToLetThrough() -> BLIPIncomingID? {
        var reply: BLIPIncomingID?
        for case (let id, .reply) in self.inbound where id.number < (reply?.number ?? .max) { reply = id }
        if let reply { return reply }
        guard self.isSerial, let first = self.order.first else { return nil }
        let id = BLIPIncomingID(isRequest: true, number: first)
        guard case .request = self.inbound[id] else { return nil }
        return id
    }

    /// A whole message stopped arriving (complete, refused or failed): it no longer holds ACKs back.
    mutating func assemblyEnded(_ id: BLIPIncomingID, _ assembly: Assembly) {
        self.assembling -= assembly.charge
        self.withheld.remove(id)
        if self.exempt == id { self.exempt = nil }
    }

    /// Under the budget again, withheld ACKs go out; still over it with nothing else to free memory, one
    /// withheld message is let through.
    mutating func relieveWithheld(effects: inout Effects) {
        guard !self.withheld.isEmpty else { return }
        if self.bufferedBytes() <= self.budget {
            for id in self.withheld { self.releaseWithheld(id, effects: &effects) }
            self.withheld.removeAll()
        } else if self.mustLetOneThrough() {
            let id =
                self.messageToLetThrough()
                ?? self.withheld.min { ($0.isRequest ? 0 : 1, $0.number) < ($1.isRequest ? 0 : 1, $1.number) }!
            self.withheld.remove(id)
            self.exempt = id
            self.releaseWithheld(id, effects: &effects)
        }
    }

    fileprivate mutating func releaseWithheld(_ id: BLIPIncomingID, effects: inout Effects) {
        switch self.inbound[id] {
        case .request(var assembly, let route):
            self.consumed(id, bytes: assembly.withheld, effects: &effects)
            assembly.withheld = 0
            self.inbound[id] = .request(assembly, route: route)
        case .reply(var assembly, let waiter):
            self.consumed(id, bytes: assembly.withheld, effects: &effects)
            assembly.withheld = 0
            self.inbound[id] = .reply(assembly, waiter: waiter)
        case .streamed, nil:
            break
        }
    }

    // MARK: - Reading

    /// Whether reading may stop without keeping anything local from finishing: nobody here waits for a
    /// reply (not yet begun, or read whole and partly arrived), an ACK or the rest of a streamed body from
    /// the peer.
    func mayPauseReading() -> Bool {
        self.replyWaiters.isEmpty && self.sendWaiters.isEmpty && self.demandWaiters.isEmpty
            && !self.streams.values.contains { !$0.isComplete }
            && !self.inbound.values.contains { if case .reply = $0 { true } else { false } }
    }

    /// Whether a complete request that expects a reply must be refused (ERR BLIP/503): the budget is
    /// exceeded and reading cannot pause, or (serial order) the request would wait for an earlier one still
    /// arriving, which only reading lets finish.
    func mustRefuseRequests(_ number: UInt64) -> Bool {
        if self.orderWouldHold(number) { return self.waitingRoomIsFull() }
        return self.bufferedBytes() > self.budget && !self.mayPauseReading()
    }

    /// Pauses reading while handlers or the incoming-request buffer are behind, if that is safe; resumes it
    /// once they have caught up (below half their limits), or at once when something starts waiting for
    /// the peer.
    mutating func updateReading(effects: inout Effects) {
        let budget = self.budget
        let total = self.bufferedBytes()
        // What handlers, queues and readers hold goes away without reading more; whole messages still
        // arriving, and requests waiting in serial order for one of them, do not: pausing for them alone
        // would wait forever.
        let releasable = self.releasableBytes()
        if self.pausedForBacklog {
            let caughtUp =
                total <= budget / 2
                && self.pendingWork.count <= self.configuration.maximumConcurrentHandlers / 2
                && self.unhandled.count <= self.configuration.incomingRequestBufferSize / 2
            if caughtUp || releasable == 0 || !self.mayPauseReading() { self.pausedForBacklog = false }
        } else {
            let behind =
                (total > budget && releasable > 0)
                || self.pendingWork.count >= self.configuration.maximumConcurrentHandlers
                || self.unhandled.count >= self.configuration.incomingRequestBufferSize
            if behind && self.mayPauseReading() {
                self.pausedForBacklog = true
                self.statistics.readPausesForBacklog += 1
            }
        }
        self.applyReading(effects: &effects)
    }

    mutating func updateReplyBacklog(effects: inout Effects) {
        let backlogged =
            !self.isWritable && self.engine.queuedReplyBytes > self.configuration.maximumQueuedReplyBytes
        guard backlogged != self.pausedForReplies else { return }
        self.pausedForReplies = backlogged
        if backlogged { self.statistics.readPausesForUnreadReplies += 1 }
        self.applyReading(effects: &effects)
    }

    fileprivate mutating func applyReading(effects: inout Effects) {
        if let shared = self.configuration.sharedBudget {
            self.updateSharedBudgetPause(shared, effects: &effects)
        }
        let paused = self.pausedForBacklog || self.pausedForReplies || self.pausedForSharedBudget
        guard paused != self.readingPaused else { return }
        self.readingPaused = paused
        self.readingVersion &+= 1
        if paused {
            effects.pauseReading = true
            effects.resumeReading = false
        } else {
            effects.resumeReading = true
            effects.pauseReading = false
        }
    }
}
