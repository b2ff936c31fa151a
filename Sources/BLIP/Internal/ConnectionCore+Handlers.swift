internal import BLIPEngine
internal import DequeModule
internal import Logging
internal import NIOConcurrencyHelpers
internal import NIOCore
internal import Tracing

extension ConnectionCore {
    /// Starts a handler for a request, or queues it (in arrival order) while every handler slot is busy.
    /// The connection keeps reading either way: a running handler may be waiting for the peer.
    func dispatch(_ work: Work, _ state: inout State, effects: inout Effects) {
        if self.mayStartHandler(state, effects) {
            state.runningHandlers += 1
            self.startInTask(work, &state, effects: &effects)
        } else {
            state.pendingWork.append(work)
            state.statistics.requestsQueuedForHandler += 1
        }
    }

    /// Takes a request for a synchronous handler: runs it after the lock when it may start now (a slot is
    /// free and nothing waits ahead of it), else queues it like any other, to run in a task.
    func dispatchSynchronous(_ work: ImmediateWork, _ state: inout State, effects: inout Effects) {
        if self.mayStartHandler(state, effects) {
            state.runningHandlers += 1
            effects.immediate = work
        } else {
            let handler = work.handler
            let queued = Work.handle(
                work.request,
                number: work.number,
                expectsReply: work.expectsReply,
                charge: work.charge
            ) { try handler($0, $1) }
            self.dispatch(queued, &state, effects: &effects)
        }
    }

    /// Whether a request's handler may start now: a slot is free (one in serial order), nothing waits ahead
    /// of it, and this operation starts no other (one frame completes at most one request).
    private func mayStartHandler(_ state: State, _ effects: Effects) -> Bool {
        let slots = self.router.handlerOrder == .serial ? 1 : self.configuration.maximumConcurrentHandlers
        return state.runningHandlers < slots && state.pendingWork.isEmpty && effects.work == nil
            && effects.immediate == nil
    }

    /// Runs a synchronous handler where its request arrived (no lock held), sends its reply, and hands its
    /// slot to whatever waits for one (in a task).
    func handleImmediately(_ work: ImmediateWork) {
        let result: Result<BLIPResponse, BLIPError>
        if let tracer = self.requestTracer {
            result = self.runImmediately(work, tracing: tracer)
        } else {
            result = self.run(number: work.number, expectsReply: work.expectsReply) {
                try work.handler(work.request, $0)
            }
        }
        // The slot goes to the request waiting longest, if any: under the lock that queues the reply.
        let charge = work.charge
        let handOnSlot = { (state: inout State, effects: inout Effects) in
            guard let next = self.handlerFinished(charge: charge, &state, effects: &effects) else { return }
            self.startInTask(next, &state, effects: &effects)
        }
        if work.expectsReply {
            self.respond(to: work.number, with: result, andThen: handOnSlot)
        } else {
            var effects = Effects()
            self.state.withLockedValue { handOnSlot(&$0, &effects) }
            self.perform(&effects)
        }
    }

    /// Has `work`, whose slot is taken, run after the lock in a handler task: an idle one if one waits,
    /// else a new one.
    private func startInTask(_ work: Work, _ state: inout State, effects: inout Effects) {
        effects.work = work
        effects.idleTask = state.idleHandlerTasks.popLast()
    }

    /// Runs handlers in one task: the first, then whatever waits for a slot when it finishes. With nothing
    /// waiting, the task stays (up to ``maximumIdleHandlerTasks`` of them) for the next request, which
    /// then costs no new task, until the connection closes.
    func runHandlers(startingWith start: HandlerTaskStart) async {
        var next = start.take()
        while let work = next.take() {
            let charge = work.charge
            // Let go of the request before waiting for the next one: an unread body stream's bookkeeping
            // and the body's bytes go when it does.
            await self.handle(consume work)
            next = await self.nextWork(afterCharge: charge)
        }
    }

    /// Handler tasks kept waiting for requests at most: enough for sequential and moderately concurrent
    /// traffic without a task per request, little memory (a couple of KiB each) after a burst.
    static let maximumIdleHandlerTasks = 8

    /// A handler of this task is done: the request waiting longest for a slot, else (the task now idle) the
    /// next request dispatched to it, or nil when the task is to end (the connection closed, the task was
    /// cancelled, or enough tasks wait already).
    private func nextWork(afterCharge charge: Int) async -> Work? {
        await withTaskCancellationHandler {
            await withUnsafeContinuation { (continuation: UnsafeContinuation<Work?, Never>) in
                var effects = Effects()
                let next = self.state.withLockedValue { state -> Work?? in
                    if let next = self.handlerFinished(charge: charge, &state, effects: &effects) { return next }
                    guard !state.isClosed, !Task.isCancelled,
                        state.idleHandlerTasks.count < Self.maximumIdleHandlerTasks
                    else { return .some(nil) }
                    state.idleHandlerTasks.append(continuation)
                    return .none
                }
                self.perform(&effects)
                if let next { continuation.resume(returning: next) }
            }
        } onCancel: {
            // The run's task group is cancelled when the connection's run ends: every handler task with it.
            let idle = self.state.withLockedValue { state in
                defer { state.idleHandlerTasks.removeAll() }
                return state.idleHandlerTasks
            }
            for idleTask in idle { idleTask.resume(returning: nil) }
        }
    }

    /// A handler is done: its request's bytes (`charge`) no longer count, and the next waiting request takes
    /// its slot (returned), or the slot is free.
    func handlerFinished(charge: Int, _ state: inout State, effects: inout Effects) -> Work? {
        self.release(charge, &state, effects: &effects)
        guard !state.isClosed, let next = state.pendingWork.popFirst() else {
            state.runningHandlers -= 1
            return nil
        }
        self.updateReading(&state, effects: &effects)
        return next
    }

    /// Runs a handler and sends what it returns.
    func handle(_ work: Work) async {
        if let tracer = self.requestTracer { return await self.handle(work, tracing: tracer) }
        let result: Result<BLIPResponse, BLIPError>
        let number: UInt64
        let expectsReply: Bool
        switch work {
        case .handle(let request, let requestNumber, let replyExpected, _, let handler):
            number = requestNumber
            expectsReply = replyExpected
            result = await self.run(number: number, expectsReply: expectsReply) { try await handler(request, $0) }
        case .handleStreaming(let request, let requestNumber, let replyExpected, let handler):
            number = requestNumber
            expectsReply = replyExpected
            result = await self.run(number: number, expectsReply: expectsReply) { try await handler(request, $0) }
        }
        if expectsReply { self.respond(to: number, with: result) }
    }

    /// ``handle(_:)`` in the request's span, which is the handler's `ServiceContext.current`. Apart, so that
    /// an untraced handler's task keeps its shallow frames (a deeper chain costs each task a malloc).
    private func handle(_ work: Work, tracing tracer: RequestTracer) async {
        let facts: RequestTracer.RequestFacts
        let number: UInt64
        let handle: (BLIPRequestContext) async throws -> BLIPResponse
        switch work {
        case .handle(let request, let requestNumber, let expectsReply, _, let handler):
            number = requestNumber
            facts = .handled(request, number: number, expectsReply: expectsReply)
            handle = { try await handler(request, $0) }
        case .handleStreaming(let request, let requestNumber, let expectsReply, let handler):
            number = requestNumber
            facts = .handled(request, number: number, expectsReply: expectsReply)
            handle = { try await handler(request, $0) }
        }
        let span = tracer.startHandling(facts)
        let context = self.handlerContext(number: number, expectsReply: facts.expectsReply)
        let result: Result<BLIPResponse, BLIPError>
        do {
            result = .success(try await ServiceContext.$current.withValue(span.context) { try await handle(context) })
            tracer.endHandling(span, expectsReply: facts.expectsReply, result: result, thrown: nil)
        } catch {
            result = .failure(self.errorReply(for: error, logger: context.logger))
            tracer.endHandling(span, expectsReply: facts.expectsReply, result: result, thrown: error)
        }
        if facts.expectsReply { self.respond(to: number, with: result) }
    }

    /// ``handleImmediately(_:)``'s handler in the request's span.
    private func runImmediately(_ work: ImmediateWork, tracing tracer: RequestTracer) -> Result<BLIPResponse, BLIPError>
    {
        let span = tracer.startHandling(.handled(work.request, number: work.number, expectsReply: work.expectsReply))
        let context = self.handlerContext(number: work.number, expectsReply: work.expectsReply)
        do {
            let reply = try ServiceContext.$current.withValue(span.context) { try work.handler(work.request, context) }
            tracer.endHandling(span, expectsReply: work.expectsReply, result: .success(reply), thrown: nil)
            return .success(reply)
        } catch {
            let reply = self.errorReply(for: error, logger: context.logger)
            tracer.endHandling(span, expectsReply: work.expectsReply, result: .failure(reply), thrown: error)
            return .failure(reply)
        }
    }

    private func run(
        number: UInt64,
        expectsReply: Bool,
        _ body: (BLIPRequestContext) async throws -> BLIPResponse
    ) async -> Result<BLIPResponse, BLIPError> {
        let context = self.handlerContext(number: number, expectsReply: expectsReply)
        do {
            return .success(try await body(context))
        } catch {
            return .failure(self.errorReply(for: error, logger: context.logger))
        }
    }

    private func run(
        number: UInt64,
        expectsReply: Bool,
        _ body: (BLIPRequestContext) throws -> BLIPResponse
    ) -> Result<BLIPResponse, BLIPError> {
        let context = self.handlerContext(number: number, expectsReply: expectsReply)
        do {
            return .success(try body(context))
        } catch {
            return .failure(self.errorReply(for: error, logger: context.logger))
        }
    }

    private func handlerContext(number: UInt64, expectsReply: Bool) -> BLIPRequestContext {
        BLIPRequestContext(
            connection: BLIPConnection(core: self),
            connectionLogger: self.logger,
            requestNumber: number,
            expectsReply: expectsReply
        )
    }

    /// The ERR reply for a handler's error: its own if it has one, else BLIP/501.
    func errorReply(for error: any Error, logger: Logger) -> BLIPError {
        if let error = error as? BLIPError { return error }
        if let error = error as? any BLIPErrorConvertible { return error.blipError }
        logger.debug("handler failed", metadata: ["blip.error": "\(error)"])
        return BLIPError(
            code: .handlerFailed,
            message: self.configuration.sendsHandlerErrorMessages ? "\(error)" : "handler failed"
        )
    }
}

/// The first request of a new handler task, handed over rather than captured: a closure's captures live as
/// long as its task, and a handler task may then wait for later requests until the connection closes (an
/// unread body stream would stay registered, and the request's bytes held, all that time).
final class HandlerTaskStart: @unchecked Sendable {
    private var work: ConnectionCore.Work?

    init(_ work: ConnectionCore.Work) {
        self.work = work
    }

    /// Called once, by the task this was made for (`addTask` orders it after `init`).
    func take() -> ConnectionCore.Work? {
        self.work.take()
    }
}
