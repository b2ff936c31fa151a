internal import BLIPEngine
internal import DequeModule
internal import Logging
internal import NIOConcurrencyHelpers
internal import NIOCore
internal import Tracing

extension ConnectionCore {

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
        let handOnSlot = { (state: inout ConnectionStateMachine, effects: inout Effects) in
            guard let next = state.handlerFinished(charge: charge, effects: &effects) else { return }
            state.startInTask(next, effects: &effects)
        }
        if work.expectsReply {
            self.respond(to: work.number, with: result, andThen: handOnSlot)
        } else {
            var effects = Effects()
            self.state.withLockedValue { handOnSlot(&$0, &effects) }
            self.perform(&effects)
        }
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
                let next = self.state.withLockedValue {
                    $0.handlerTaskIdle(
                        afterCharge: charge,
                        continuation: continuation,
                        isCancelled: Task.isCancelled,
                        effects: &effects
                    )
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
