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
/// In serial order, requests that wait for an earlier one still arriving (ConnectionCore+SerialOrder) hold
/// memory that only reading frees: reading never pauses for them, the earliest request is the one let
/// through, and a request that expects a reply and would wait behind it is refused with ERR BLIP/503 while
/// the budget is exceeded, so that what waits stays within the budget.
/// Past ``BLIPConnection/Configuration/incomingBufferHardLimit`` the peer is ignoring flow control: the
/// connection closes with 1008.
extension ConnectionCore {
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
    private func updateSharedBudgetPause(_ shared: SharedBufferBudget, _ state: inout State, effects: inout Effects) {
        let overShare = self.bufferedBytes(state) > shared.share
        var pause = shared.isExceeded && overShare
        let id = ObjectIdentifier(self)
        // Over its share with only messages still arriving. The exemption is kept while that lasts (a
        // dip of the total under the limit does not end it), so that it passes on only as messages finish.
        let onlyArriving = overShare && self.releasableBytes(state) <= 0
        if state.isExemptFromSharedBudget {
            if onlyArriving {
                pause = false
            } else {
                state.isExemptFromSharedBudget = false
                effects.later { shared.endExemption(id) }
            }
        } else if pause && onlyArriving && shared.exempt(id) {
            pause = false
            state.isExemptFromSharedBudget = true
        }
        guard pause != state.pausedForSharedBudget else { return }
        state.pausedForSharedBudget = pause
        guard pause else { return }
        state.statistics.readPausesForSharedBudget += 1
        // Held until woken or closed (closing stops the wait), so a paused connection is never forgotten.
        effects.later { shared.wait(id) { self.sharedBudgetHasRoom() } }
    }

    /// The shared budget is back within its limit: withheld ACKs and paused reading are decided again.
    func sharedBudgetHasRoom() {
        var effects = Effects()
        self.state.withLockedValue { state in
            guard !state.isClosed else { return }
            // The wake took this connection off the waiting list: if the budget is exceeded again by now,
            // the pause must be decided (and waited on) afresh, not taken as already registered.
            state.pausedForSharedBudget = false
            self.relieveWithheld(&state, effects: &effects)
            self.updateReading(&state, effects: &effects)
        }
        self.perform(&effects)
    }

    /// The largest body read whole: the message limit, but never more than the budget can hold.
    var wholeBodyLimit: Int {
        min(self.configuration.maximumIncomingMessageSize, self.configuration.incomingBufferBudget)
    }

    func bufferedBytes(_ state: State) -> Int {
        state.buffered + state.engine.bufferedPropertyBytes
    }

    /// Counts `bytes` more held for the peer. Returns false if that took the connection past its hard
    /// limit (it is failing).
    func charge(_ bytes: Int, _ state: inout State, effects: inout Effects) -> Bool {
        state.buffered += bytes
        self.configuration.sharedBudget?.add(bytes)
        let total = self.bufferedBytes(state)
        if total > state.statistics.peakBufferedIncomingBytes { state.statistics.peakBufferedIncomingBytes = total }
        return self.checkHardLimit(&state, effects: &effects)
    }

    /// Fails the connection if the peer made it hold more than the hard limit.
    func checkHardLimit(_ state: inout State, effects: inout Effects) -> Bool {
        let total = self.bufferedBytes(state)
        guard total > self.configuration.incomingBufferHardLimit else { return true }
        let error = BLIPConnectionError(
            .limitExceeded,
            "the peer made the connection hold \(total) bytes (limit \(self.configuration.incomingBufferHardLimit))"
        )
        self.fatal(error, closeCode: .policyViolation, byPeer: true, &state, effects: &effects)
        return false
    }

    /// `bytes` held for the peer were let go of (a handler finished, a reader read).
    func release(_ bytes: Int, _ state: inout State, effects: inout Effects) {
        guard !state.isClosed, bytes > 0 else { return }
        state.buffered -= bytes
        if let shared = self.configuration.sharedBudget {
            shared.subtract(bytes)
            if shared.hasWaiters { effects.later { shared.wakeIfRoom() } }
        }
        self.relieveWithheld(&state, effects: &effects)
        self.updateReading(&state, effects: &effects)
    }

    /// A whole message's body bytes arrived: they count as consumed, so ACKs go on, unless the connection
    /// holds more than its budget.
    func consumeOrWithhold(
        _ id: BLIPIncomingID,
        _ assembly: inout Assembly,
        bytes: Int,
        _ state: inout State,
        effects: inout Effects
    ) {
        guard bytes > 0 else { return }
        if state.exempt == id || self.bufferedBytes(state) <= self.budget {
            Self.consumed(id, bytes: bytes, &state, effects: &effects)
            return
        }
        assembly.withheld += bytes
        state.withheld.insert(id)
        // Nothing but messages still arriving holds memory: no handler or reader will free any, so let
        // one go on (else nothing could): this one, or in serial order the earliest request, which the
        // others wait for. It counts against the hard limit, which leaves room for it.
        if self.mustLetOneThrough(state) {
            let chosen = self.messageToLetThrough(state) ?? id
            state.exempt = chosen
            state.withheld.remove(chosen)
            if chosen == id {
                Self.consumed(id, bytes: assembly.withheld, &state, effects: &effects)
                assembly.withheld = 0
            } else {
                self.releaseWithheld(chosen, &state, effects: &effects)
            }
        }
    }

    /// In serial order, past the budget, whether a request still arriving that would wait for an earlier one
    /// is given up (``shed(_:_:_:effects:)``): it could only add to what reading alone frees, and without flow
    /// control (the seed dialect), or with many messages in flight each within its send window, the peer
    /// would fill the room the earliest request needs to finish. The earliest, the exempt one and no-reply
    /// requests (nothing could tell their sender) are never given up.
    func shedsWaitingRequest(_ id: BLIPIncomingID, _ assembly: Assembly, _ state: State) -> Bool {
        id.isRequest && assembly.message.expectsReply && self.isSerial && state.exempt != id
            && self.waitingRoomIsFull(state) && self.orderWouldHold(id.number, state)
    }

    /// In serial order, whether requests that would wait for an earlier one still arriving have filled their
    /// room: the budget, less what the frames in flight may add before the next check. What waits stays
    /// within it, so that the earliest request (up to the whole budget) still finishes under the hard limit
    /// (twice the budget by default).
    func waitingRoomIsFull(_ state: State) -> Bool {
        let budget = self.budget
        return self.bufferedBytes(state) > budget - min(budget / 4, 64 << 10)
    }

    /// Gives up a request still arriving: its bytes go, the rest of it is drained unread (and acknowledged,
    /// so that it ends soon), and it gets ERR BLIP/503, which the engine holds until its last frame.
    func shed(_ id: BLIPIncomingID, _ assembly: Assembly, _ state: inout State, effects: inout Effects) {
        self.assemblyEnded(id, assembly, &state)
        self.release(assembly.charge, &state, effects: &effects)
        if state.engine.drain(id) { effects.wakeWriter = true }
        state.statistics.requestsRefusedBusy += 1
        let error = BLIPError(code: .busy, message: "the connection is too busy to take this request")
        self.enqueueReply(error, to: id.number, &state, effects: &effects)
    }

    /// Bytes held that handlers, queues and readers will free without reading more from the peer: not those
    /// of whole messages still arriving, nor of requests waiting in serial order for one that is.
    func releasableBytes(_ state: State) -> Int {
        let releasable = state.buffered - state.assembling
        return state.order.hasReadyItems ? releasable - self.heldForOrder(state) : releasable
    }

    /// Whether one message whose ACKs are withheld must be let through: nothing held can be freed without
    /// reading more, or something here waits for the peer (a running handler waiting for a reply holds its
    /// slot, and in serial order every request behind it, until that reply has arrived).
    func mustLetOneThrough(_ state: State) -> Bool {
        state.exempt == nil && (self.releasableBytes(state) == 0 || !self.mayPauseReading(state))
    }

    /// The message to let through when one must be: a reply read whole that a caller waits for (the
    /// earliest), else in serial order the earliest request if it is still arriving whole (the one that frees
    /// those waiting behind it); nil leaves the choice to the caller.
    private func messageToLetThrough(_ state: State) -> BLIPIncomingID? {
        var reply: BLIPIncomingID?
        for case (let id, .reply) in state.inbound where id.number < (reply?.number ?? .max) { reply = id }
        if let reply { return reply }
        guard self.isSerial, let first = state.order.first else { return nil }
        let id = BLIPIncomingID(isRequest: true, number: first)
        guard case .request = state.inbound[id] else { return nil }
        return id
    }

    /// A whole message stopped arriving (complete, refused or failed): it no longer holds ACKs back.
    func assemblyEnded(_ id: BLIPIncomingID, _ assembly: Assembly, _ state: inout State) {
        state.assembling -= assembly.charge
        state.withheld.remove(id)
        if state.exempt == id { state.exempt = nil }
    }

    /// Under the budget again, withheld ACKs go out; still over it with nothing else to free memory, one
    /// withheld message is let through.
    func relieveWithheld(_ state: inout State, effects: inout Effects) {
        guard !state.withheld.isEmpty else { return }
        if self.bufferedBytes(state) <= self.budget {
            for id in state.withheld { self.releaseWithheld(id, &state, effects: &effects) }
            state.withheld.removeAll()
        } else if self.mustLetOneThrough(state) {
            let id =
                self.messageToLetThrough(state)
                ?? state.withheld.min { ($0.isRequest ? 0 : 1, $0.number) < ($1.isRequest ? 0 : 1, $1.number) }!
            state.withheld.remove(id)
            state.exempt = id
            self.releaseWithheld(id, &state, effects: &effects)
        }
    }

    private func releaseWithheld(_ id: BLIPIncomingID, _ state: inout State, effects: inout Effects) {
        switch state.inbound[id] {
        case .request(var assembly, let route):
            Self.consumed(id, bytes: assembly.withheld, &state, effects: &effects)
            assembly.withheld = 0
            state.inbound[id] = .request(assembly, route: route)
        case .reply(var assembly, let waiter):
            Self.consumed(id, bytes: assembly.withheld, &state, effects: &effects)
            assembly.withheld = 0
            state.inbound[id] = .reply(assembly, waiter: waiter)
        case .streamed, nil:
            break
        }
    }

    // MARK: - Reading

    /// Whether reading may stop without keeping anything local from finishing: nobody here waits for a
    /// reply (not yet begun, or read whole and partly arrived), an ACK or the rest of a streamed body from
    /// the peer.
    func mayPauseReading(_ state: State) -> Bool {
        state.replyWaiters.isEmpty && state.sendWaiters.isEmpty && state.demandWaiters.isEmpty
            && !state.streams.values.contains { !$0.isComplete }
            && !state.inbound.values.contains { if case .reply = $0 { true } else { false } }
    }

    /// Whether a complete request that expects a reply must be refused (ERR BLIP/503): the budget is
    /// exceeded and reading cannot pause, or (serial order) the request would wait for an earlier one still
    /// arriving, which only reading lets finish.
    func mustRefuseRequests(_ number: UInt64, _ state: State) -> Bool {
        if self.orderWouldHold(number, state) { return self.waitingRoomIsFull(state) }
        return self.bufferedBytes(state) > self.budget && !self.mayPauseReading(state)
    }

    /// Pauses reading while handlers or the incoming-request buffer are behind, if that is safe; resumes it
    /// once they have caught up (below half their limits), or at once when something starts waiting for
    /// the peer.
    func updateReading(_ state: inout State, effects: inout Effects) {
        let budget = self.budget
        let total = self.bufferedBytes(state)
        // What handlers, queues and readers hold goes away without reading more; whole messages still
        // arriving, and requests waiting in serial order for one of them, do not: pausing for them alone
        // would wait forever.
        let releasable = self.releasableBytes(state)
        if state.pausedForBacklog {
            let caughtUp =
                total <= budget / 2
                && state.pendingWork.count <= self.configuration.maximumConcurrentHandlers / 2
                && state.unhandled.count <= self.configuration.incomingRequestBufferSize / 2
            if caughtUp || releasable == 0 || !self.mayPauseReading(state) { state.pausedForBacklog = false }
        } else {
            let behind =
                (total > budget && releasable > 0)
                || state.pendingWork.count >= self.configuration.maximumConcurrentHandlers
                || state.unhandled.count >= self.configuration.incomingRequestBufferSize
            if behind && self.mayPauseReading(state) {
                state.pausedForBacklog = true
                state.statistics.readPausesForBacklog += 1
            }
        }
        self.applyReading(&state, effects: &effects)
    }

    /// The network's room changed: while it is full and replies pile up, the peer is not reading them, so
    /// its requests are not read either (each would add a reply).
    func writabilityChanged(_ isWritable: Bool) {
        var effects = Effects()
        self.state.withLockedValue { state in
            guard !state.isClosed else { return }
            state.isWritable = isWritable
            self.updateReplyBacklog(&state, effects: &effects)
        }
        self.perform(&effects)
    }

    func updateReplyBacklog(_ state: inout State, effects: inout Effects) {
        let backlogged =
            !state.isWritable && state.engine.queuedReplyBytes > self.configuration.maximumQueuedReplyBytes
        guard backlogged != state.pausedForReplies else { return }
        state.pausedForReplies = backlogged
        if backlogged { state.statistics.readPausesForUnreadReplies += 1 }
        self.applyReading(&state, effects: &effects)
    }

    private func applyReading(_ state: inout State, effects: inout Effects) {
        if let shared = self.configuration.sharedBudget {
            self.updateSharedBudgetPause(shared, &state, effects: &effects)
        }
        let paused = state.pausedForBacklog || state.pausedForReplies || state.pausedForSharedBudget
        guard paused != state.readingPaused else { return }
        state.readingPaused = paused
        state.readingVersion &+= 1
        if paused {
            effects.pauseReading = true
            effects.resumeReading = false
        } else {
            effects.resumeReading = true
            effects.pauseReading = false
        }
    }
}
