internal import BLIPEngine
internal import DequeModule
internal import Logging
internal import NIOConcurrencyHelpers
internal import NIOCore
internal import Tracing

extension ConnectionStateMachine {
    /// A handler task finished its request: the next request for it, nil if it is to end, or `.none` if it waits idle (`continuation`).
    mutating func handlerTaskIdle(
        afterCharge charge: Int,
        continuation: UnsafeContinuation<Work?, Never>,
        isCancelled: Bool,
        effects: inout Effects
    ) -> Work?? {
        if let next = self.handlerFinished(charge: charge, effects: &effects) { return next }
        guard !self.isClosed, !isCancelled,
            self.idleHandlerTasks.count < ConnectionCore.maximumIdleHandlerTasks
        else { return .some(nil) }
        self.idleHandlerTasks.append(continuation)
        return .none
    }

    /// Starts a handler for a request, or queues it (in arrival order) while every handler slot is busy.
    /// The connection keeps reading either way: a running handler may be waiting for the peer.
    mutating func dispatch(_ work: Work, effects: inout Effects) {
        if self.mayStartHandler(effects) {
            self.runningHandlers += 1
            self.startInTask(work, effects: &effects)
        } else {
            self.pendingWork.append(work)
            self.statistics.requestsQueuedForHandler += 1
        }
    }

    /// Takes a request for a synchronous handler: runs it after the lock when it may start now (a slot is
    /// free and nothing waits ahead of it), else queues it like any other, to run in a task.
    mutating func dispatchSynchronous(_ work: ImmediateWork, effects: inout Effects) {
        if self.mayStartHandler(effects) {
            self.runningHandlers += 1
            effects.immediate = work
        } else {
            let handler = work.handler
            let queued = Work.handle(
                work.request,
                number: work.number,
                expectsReply: work.expectsReply,
                charge: work.charge
            ) { try handler($0, $1) }
            self.dispatch(queued, effects: &effects)
        }
    }

    /// Whether a request's handler may start now: a slot is free (one in serial order), nothing waits ahead
    /// of it, and this operation starts no other (one frame completes at most one request).
    fileprivate func mayStartHandler(_ effects: Effects) -> Bool {
        let slots = self.router.handlerOrder == .serial ? 1 : self.configuration.maximumConcurrentHandlers
        return self.runningHandlers < slots && self.pendingWork.isEmpty && effects.work == nil
            && effects.immediate == nil
    }

    /// Has `work`, whose slot is taken, run after the lock in a handler task: an idle one if one waits,
    /// else a new one.
    mutating func startInTask(_ work: Work, effects: inout Effects) {
        effects.work = work
        effects.idleTask = self.idleHandlerTasks.popLast()
    }

    /// A handler is done: its request's bytes (`charge`) no longer count, and the next waiting request takes
    /// its slot (returned), or the slot is free.
    mutating func handlerFinished(charge: Int, effects: inout Effects) -> Work? {
        self.release(charge, effects: &effects)
        guard !self.isClosed, let next = self.pendingWork.popFirst() else {
            self.runningHandlers -= 1
            return nil
        }
        self.updateReading(effects: &effects)
        return next
    }
}
