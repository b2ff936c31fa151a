internal import BLIPEngine
internal import BLIPWire
internal import CoreMetrics
internal import DequeModule
internal import Logging
internal import NIOConcurrencyHelpers
internal import NIOCore
internal import Synchronization

/// A connection's edge: its ``ConnectionStateMachine`` behind one lock, and everything that waits or runs
/// around it (callers of `sendRequest`, body streams, handler tasks, the transport).
///
/// Every operation takes the lock once, calls one event of the state machine, and performs the
/// ``ConnectionStateMachine/Effects`` it returned after leaving the lock: resuming continuations, waking or
/// closing the transport, starting handlers, logging and counting (the application's log handlers and
/// metrics backends), and letting go of objects whose `deinit` calls back into the connection (an
/// unanswered ``BLIPIncomingRequest``, a body stream). Nothing of the application's ever runs while the
/// lock is held.
final class ConnectionCore: Sendable {
    let transport: any BLIPTransport
    /// The transport's event loop as an actor, for callers already running there (see EventLoopIsolation).
    let loopIsolation: EventLoopIsolation?
    let configuration: BLIPConnection.Configuration
    let logger: Logger
    /// What the application attached to the connection when it was accepted (the authenticated user).
    let identity: (any Sendable)?
    let metrics: ConnectionMetrics
    /// Spans for requests, when tracing is on.
    let requestTracer: RequestTracer?
    /// Whether frame-level trace logging is on (checked once: the hot path should not ask per frame).
    let tracesFrames: Bool
    let state: CountingLockedValueBox<ConnectionStateMachine>
    let nextToken = Atomic<UInt64>(1)
    /// Set (under the lock) while a graceful close waits, so that ``perform(_:)`` looks at the state only
    /// then: one relaxed load per operation otherwise.
    let drainIsWaiting = Atomic<Bool>(false)
    /// What ``run()`` starts tasks for: handlers, and the bodies of streamed replies.
    let work: AsyncStream<Job>
    let workContinuation: AsyncStream<Job>.Continuation
    /// Where jobs go instead, when a harness steps the connection without tasks (``BLIPSteppedConnection``);
    /// nil for a running connection.
    let jobSink: (@Sendable (Job) -> Void)?
    /// The seed and BLIP 2 gzip settings, for large bodies gzipped before the lock; nil in BLIP 3 (its
    /// frames are compressed in send order, by one stream, so under the lock) and with compression off.
    let gzipAhead: BLIPFrameEncoder.Configuration?

    enum Job: Sendable {
        /// Runs handlers in one slot, starting with this request's.
        case handlers(startingWith: Work)
        /// Pulls and sends a streamed reply's body, outside the handler slots.
        case streamedReply(StreamedReplyHead, BLIPBodySource)
    }

    typealias Effects = ConnectionStateMachine.Effects
    typealias Work = ConnectionStateMachine.Work
    typealias ImmediateWork = ConnectionStateMachine.ImmediateWork
    typealias ReplyWaiter = ConnectionStateMachine.ReplyWaiter
    typealias Counts = ConnectionStateMachine.Counts

    init(
        transport: any BLIPTransport,
        configuration: BLIPConnection.Configuration,
        router: BLIPRouter,
        logger: Logger,
        identity: (any Sendable)? = nil,
        jobSink: (@Sendable (Job) -> Void)? = nil
    ) {
        self.jobSink = jobSink
        self.transport = transport
        self.loopIsolation = (transport.taskExecutor as? any EventLoopBound).map { EventLoopIsolation($0.eventLoop) }
        self.identity = identity
        self.configuration = configuration
        var logger = logger
        logger[metadataKey: "blip.dialect"] = "\(transport.dialect)"
        self.logger = logger
        self.tracesFrames = logger.logLevel <= .trace
        self.metrics = ConnectionMetrics.forDialect(transport.dialect)
        self.requestTracer = RequestTracer(configuration.tracing)
        let engineConfiguration = configuration.engineConfiguration(dialect: transport.dialect)
        let encoder = engineConfiguration.encoder
        self.gzipAhead = transport.dialect.compressesFrames || encoder.compressionLevel == 0 ? nil : encoder
        self.state = CountingLockedValueBox(
            ConnectionStateMachine(
                configuration: configuration,
                engine: engineConfiguration,
                router: router,
                logger: logger
            )
        )
        configuration.sharedBudget?.connectionOpened()
        (self.work, self.workContinuation) = AsyncStream.makeStream(of: Job.self)
        self.state.withLockedValue { $0.ownerReference = self }
    }

    func start() {
        self.transport.start(BLIPTransportSink(core: self))
    }

    /// Does what an operation decided under the lock. Objects in `effects.released` go when the caller's
    /// `effects` does, after this returns, also outside the lock. In-out, so that the work and the reply
    /// are taken out of `effects` rather than copied (a `consuming` parameter made callers copy it whole).
    func perform(_ effects: inout Effects) {
        if let work = effects.work.take() {
            if let idleTask = effects.idleTask {
                idleTask.resume(returning: work)
            } else {
                self.schedule(.handlers(startingWith: work))
            }
        }
        for action in effects.deferred { action() }
        // A closed connection's job stream ends here, with its deferred actions: a job that an immediate
        // handler run below would add after the close is dropped, not started.
        if effects.finishJobs { self.workContinuation.finish() }
        if effects.hasReply, let (waiter, response) = effects.takeReply() { Self.succeed(waiter, response) }
        self.count(effects.counts)
        if effects.pauseReading || effects.resumeReading { self.applyReadingToTransport() }
        if let reason = effects.closeTransport {
            self.transport.close(reason)
        } else if effects.wakeWriter {
            self.transport.wakeWriter()
        }
        if let immediate = effects.immediate.take() { self.handleImmediately(immediate) }
        if self.drainIsWaiting.load(ordering: .relaxed) { self.resumeDrainWaitersIfQuiet() }
    }

    /// Hands a job to ``run()``'s task group (or to the harness stepping the connection).
    func schedule(_ job: Job) {
        if let jobSink = self.jobSink { jobSink(job) } else { self.workContinuation.yield(job) }
    }

    /// Tells the transport to read or not, as the state says now. Two threads can decide opposite changes
    /// one after the other under the lock and then make their calls in the opposite order (each calls after
    /// the lock): the transport would stay paused with nothing left to resume it. So whoever finds that the
    /// decision changed during its call calls again; the transport's last call is the latest decision.
    private func applyReadingToTransport() {
        var decision = self.state.withLockedValue { ($0.readingPaused, $0.readingVersion) }
        while true {
            if decision.0 { self.transport.pauseReading() } else { self.transport.resumeReading() }
            let now = self.state.withLockedValue { ($0.readingPaused, $0.readingVersion) }
            if now.1 == decision.1 { return }
            decision = now
        }
    }

    private func count(_ counts: Counts) {
        if counts.messagesSent > 0 { self.metrics.messagesSent.increment(by: Int64(counts.messagesSent)) }
        if counts.messagesReceived > 0 { self.metrics.messagesReceived.increment(by: Int64(counts.messagesReceived)) }
        if counts.errorRepliesSent > 0 { self.metrics.errorRepliesSent.increment(by: Int64(counts.errorRepliesSent)) }
        if counts.errorRepliesReceived > 0 {
            self.metrics.errorRepliesReceived.increment(by: Int64(counts.errorRepliesReceived))
        }
        if counts.unhandledRequests > 0 {
            self.metrics.unhandledRequests.increment(by: Int64(counts.unhandledRequests))
            self.configuration.unhandledRequestObserver?(counts.unhandledRequests)
        }
        if counts.protocolErrors > 0 { self.metrics.protocolErrors.increment(by: Int64(counts.protocolErrors)) }
        if counts.failedRequests > 0 { self.metrics.failedRequests.increment(by: Int64(counts.failedRequests)) }
    }

}

extension ConnectionCore {
    // MARK: - Lifecycle

    /// Runs handlers until the connection closes; handlers (and streamed reply bodies) still running then
    /// are cancelled, since their replies can no longer be sent. `scope`, the application's own work for
    /// the connection, runs as one more child, cancelled with them: one task group per connection, not
    /// two (an idle server connection's memory is mostly its tasks and groups).
    func run(scope: (@Sendable () async -> Void)? = nil) async -> BLIPCloseStatus {
        var jobs = self.work.makeAsyncIterator()
        // Without a scope, the task group waits for the first job: its storage and the frames under it are
        // a good part of what an idle connection (most of a server's) costs.
        var first: Job?
        if scope == nil {
            first = await jobs.next()  // in a variable the group empties (`take()`), not a `let` kept to the end
            if first == nil { return await self.closed() }
        }
        await withDiscardingTaskGroup { group in
            if let scope { group.addTask { await scope() } }
            // Taken, not kept: a job holds its request (and any body stream) until its task lets go of it.
            if let job = first.take() { self.start(job, in: &group) }
            while let job = await jobs.next() { self.start(job, in: &group) }
            group.cancelAll()
        }
        return await self.closed()
    }

    private func start(_ job: Job, in group: inout DiscardingTaskGroup) {
        switch job {
        case .handlers(let first):
            let start = HandlerTaskStart(first)
            group.addTask { await self.runHandlers(startingWith: start) }
        case .streamedReply(let head, let body): group.addTask { await body.send(self, head) }
        }
    }

    /// Closes the connection with `reason` (unless it is closed already) and waits until it is closed.
    func close(_ reason: BLIPCloseReason) async -> BLIPCloseStatus {
        let isOpen = self.state.withLockedValue { state in
            guard !state.isClosed else { return false }
            if state.requestedClose == nil { state.requestedClose = reason }
            return true
        }
        if isOpen { self.transport.close(reason) }
        return await self.closed()
    }

    /// Waits until the connection has closed.
    func closed() async -> BLIPCloseStatus {
        await withWaiterContinuation { (continuation: WaiterContinuation<BLIPCloseStatus, Never>) in
            let status = self.state.withLockedValue { state -> BLIPCloseStatus? in
                guard let status = state.closeStatus else {
                    state.closeWaiters.append(continuation)
                    return nil
                }
                return status
            }
            if let status { continuation.resume(returning: status) }
        }
    }

    var isClosed: Bool { self.state.withLockedValue { $0.isClosed } }

    var closeStatus: BLIPCloseStatus? { self.state.withLockedValue { $0.closeStatus } }

    var closeError: BLIPConnectionError? { self.state.withLockedValue { $0.closeError } }

    /// Whether the connection ended with the close the application asked for (not the peer's, not a
    /// failure).
    var closedAsRequested: Bool {
        self.state.withLockedValue { state in
            guard let status = state.closeStatus, let requested = state.requestedClose else { return false }
            return status.initiator == .local && status.underlying == nil && status.code == requested.code
        }
    }

    var stateDescription: String { self.state.withLockedValue { $0.engine.debugDescription } }

    var statistics: BLIPConnectionStatistics { self.state.withLockedValue { $0.currentStatistics } }

    /// Outstanding bookkeeping, for tests that check a connection leaves nothing behind: the count of
    /// callers, streams, buffered requests and messages the connection still tracks.
    var pendingBookkeeping: Int { self.state.withLockedValue { $0.pendingBookkeeping } }

    /// The transport is gone: everything pending fails at once. A nil status is a normal close the
    /// transport says no more about: the end of the close this side asked for, or else the peer's.
    func transportClosed(_ status: BLIPCloseStatus?) {
        var effects = Effects()
        self.state.withLockedValue { $0.transportClosed(status, effects: &effects) }
        self.perform(&effects)
    }

    /// Hands a whole reply to its caller (after the lock).
    static func succeed(_ waiter: ReplyWaiter, _ response: BLIPResponse) {
        switch waiter {
        case .whole(let continuation): continuation.resume(returning: response)
        case .callback(let handler): handler(.success(response))
        case .streamed(let continuation):
            // Unreachable: a normal reply to a streaming request is streamed from its start.
            continuation.resume(throwing: BLIPConnectionError(.invalidMessage, "unexpected reply"))
        }
    }
}
