internal import BLIPEngine
internal import BLIPWire
internal import CoreMetrics
internal import DequeModule
internal import Logging
internal import NIOConcurrencyHelpers
internal import NIOCore
internal import Synchronization

/// The shared heart of a connection: the engine behind one lock, with everything waiting on it
/// (callers of `sendRequest`, body streams, handlers).
///
/// Every operation computes under the lock what must happen and does it after leaving the lock
/// (``Effects``): resuming continuations, waking or closing the transport, logging and counting (the
/// application's log handlers and metrics backends), and letting go of objects whose `deinit` calls back
/// into the connection (an unanswered ``BLIPIncomingRequest``, a body stream). Nothing of the
/// application's ever runs while the lock is held.
final class ConnectionCore: Sendable {
    let transport: any BLIPTransport
    /// The transport's event loop as an actor, for callers already running there (see EventLoopIsolation).
    let loopIsolation: EventLoopIsolation?
    let configuration: BLIPConnection.Configuration
    let router: BLIPRouter
    /// `router.handlerOrder == .serial`, read once (asked for every request).
    let isSerial: Bool
    let logger: Logger
    /// What the application attached to the connection when it was accepted (the authenticated user).
    let identity: (any Sendable)?
    let metrics: ConnectionMetrics
    /// Spans for requests, when tracing is on.
    let requestTracer: RequestTracer?
    /// Whether frame-level trace logging is on (checked once: the hot path should not ask per frame).
    let tracesFrames: Bool
    let state: CountingLockedValueBox<State>
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

    enum Job: Sendable {
        /// Runs handlers in one slot, starting with this request's.
        case handlers(startingWith: Work)
        /// Pulls and sends a streamed reply's body, outside the handler slots.
        case streamedReply(StreamedReplyHead, BLIPBodySource)
    }

    enum Work: Sendable {
        /// `charge`: the bytes the request counts against the buffer budget until its handler is done.
        case handle(BLIPRequest, number: UInt64, expectsReply: Bool, charge: Int, BLIPRouter.Handler)
        case handleStreaming(BLIPStreamedRequest, number: UInt64, expectsReply: Bool, BLIPRouter.StreamingHandler)

        /// The bytes to release when the handler is done (a streamed body releases its own as it is read).
        var charge: Int {
            if case .handle(_, _, _, let charge, _) = self { charge } else { 0 }
        }
    }

    /// A request for a ``BLIPRouter/SynchronousHandler`` that runs where it arrived.
    struct ImmediateWork: Sendable {
        var request: BLIPRequest
        var number: UInt64
        var expectsReply: Bool
        var charge: Int
        var handler: BLIPRouter.SynchronousHandler
    }

    enum ReplyWaiter {
        case whole(WaiterContinuation<BLIPResponse, any Error>)
        case streamed(WaiterContinuation<BLIPStreamedResponse, any Error>)
        /// A caller that asked to be called back (`BLIPConnection.sendRequest(_:timeout:progress:onReply:)`).
        case callback(BLIPReplyHandler)
    }

    /// A message read whole, between its first and last frame.
    struct Assembly {
        var message: BLIPIncomingMessage
        var body: ByteBuffer
        /// Bytes it counts against the buffer budget.
        var charge: Int
        /// Body bytes not yet reported consumed: their ACKs wait while the budget is exceeded.
        var withheld = 0
        /// It began arriving during a graceful close (a request is then refused once complete; one that
        /// began before is in flight, and handled).
        var beganWhileClosing = false
    }

    /// An incoming message between its first and last frame.
    enum Inbound {
        /// A request to hand to a handler (or to the incoming-requests sequence) once complete.
        case request(Assembly, route: BLIPRouter.Route?)
        /// A reply (or ERR) its caller waits for whole.
        case reply(Assembly, waiter: ReplyWaiter)
        /// Read by a body stream.
        case streamed
    }

    struct BodyStreamState {
        var chunks: Deque<ByteBuffer> = []
        /// Bytes of `chunks`, which count against the buffer budget until read.
        var keptBytes = 0
        var isComplete = false
        var failure: (any Error)?
        var waiter: WaiterContinuation<ByteBuffer?, any Error>?
    }

    /// Only ever touched under the connection's lock (the engine is not thread-safe).
    struct State: @unchecked Sendable {
        let engine: BLIPConnectionEngine
        var replyWaiters = SequentialKeyTable<ReplyWaiter>()
        /// No-reply requests whose sender waits for the last frame to leave.
        var sendWaiters: [BLIPOutgoingID: WaiterContinuation<Void, any Error>] = [:]
        /// Streamed bodies waiting for room to add more.
        var demandWaiters: [BLIPOutgoingID: WaiterContinuation<Void, any Error>] = [:]
        /// Callers' tokens, so that a cancellation finds its message (and back, to forget them).
        var tokens = SequentialKeyTable<BLIPOutgoingID>()
        var tokenOfMessage = SequentialKeyTable<UInt64>()
        var cancelledTokens: Set<UInt64> = []
        var inbound: [BLIPIncomingID: Inbound] = [:]
        var streams: [BLIPIncomingID: BodyStreamState] = [:]
        var unhandled: Deque<BLIPIncomingRequest> = []
        var unhandledWaiter: WaiterContinuation<BLIPIncomingRequest?, Never>?
        /// Handlers running, and requests waiting for one of them to finish.
        var runningHandlers = 0
        var pendingWork: Deque<Work> = []
        /// Serial handler order: requests ready before an earlier one (see SerialOrder).
        var order = SerialOrder()
        /// Handler tasks that ran out of work, waiting for the next request (see
        /// ConnectionCore+Handlers): starting a handler in one of them costs no task.
        var idleHandlerTasks: [UnsafeContinuation<Work?, Never>] = []
        /// Bytes the peer makes us hold (see ConnectionCore+Backpressure), and those of whole messages
        /// still arriving.
        var buffered = 0
        var assembling = 0
        /// Messages whose ACKs are held back, and the one that may go on regardless (so that one always can).
        var withheld: Set<BLIPIncomingID> = []
        var exempt: BLIPIncomingID?
        var pausedForBacklog = false
        var pausedForReplies = false
        /// Paused while the shared budget is exceeded and this connection holds more than its share.
        var pausedForSharedBudget = false
        /// Reading on past its share of the exceeded shared budget (``SharedBufferBudget/exempt(_:)``).
        var isExemptFromSharedBudget = false
        var readingPaused = false
        /// Bumped at each change of `readingPaused` (see ``ConnectionCore/applyReadingToTransport()``).
        var readingVersion = 0
        var isWritable = true
        /// After a fatal error from the peer: bytes of replies still written before the close.
        var finishingReplies = 0
        var closeError: BLIPConnectionError?
        /// Whether `closeError` is set. Tested by pattern, because `closeError == nil` copies the error
        /// (its string, underlying error and status) through the runtime's generic value witnesses.
        var isClosed: Bool {
            if case .none = self.closeError { return false }
            return true
        }

        /// Forgets the caller's token of `message`, once its wait has ended (callers called back have none).
        mutating func forgetToken(of message: BLIPOutgoingID) {
            guard let token = self.tokenOfMessage.removeValue(forKey: message) else { return }
            self.tokens.removeValue(forKey: token)
        }
        /// Set with `closeError`: how the connection ended.
        var closeStatus: BLIPCloseStatus?
        /// The close the application asked for, while the transport carries it out.
        var requestedClose: BLIPCloseReason?
        /// Closes asked for right after the reply to a request (``BLIPRequestContext/closeAfterReply(code:reason:)``),
        /// by request number.
        var closesAfterReply: [UInt64: CloseAfterReply] = [:]
        var closeWaiters: [WaiterContinuation<BLIPCloseStatus, Never>] = []
        var statistics = BLIPConnectionStatistics()
        /// Our requests that report progress, until their reply starts; then their replies (see
        /// ConnectionCore+Progress).
        var progress: [BLIPOutgoingID: ProgressReporter] = [:]
        var replyProgress: [BLIPIncomingID: ReplyProgress] = [:]
        /// The last profile looked up in the router, and what it found (the router never changes).
        var lastRoute: (profile: String, route: BLIPRouter.Route?)?
        /// A graceful close is under way: new requests that expect a reply get ERR BLIP/503.
        var isDraining = false
        /// Graceful closes waiting for nothing to be in flight, by token.
        var drainWaiters: [UInt64: WaiterContinuation<Void, Never>] = [:]
    }

    /// What to do after leaving the lock.
    struct Effects {
        var wakeWriter = false
        var closeTransport: BLIPCloseReason?
        var pauseReading = false
        var resumeReading = false
        /// A handler to start (at most one per operation: one frame starts at most one request), in
        /// `idleTask` if one was waiting, else in a new task.
        var work: Work?
        var idleTask: UnsafeContinuation<Work?, Never>?
        /// A synchronous handler to run after the lock, right here (it holds a handler slot meanwhile).
        var immediate: ImmediateWork?
        var deferred: [@Sendable () -> Void] = []
        /// A whole reply for its caller: resumed after `deferred`. Held apart from it because it is the
        /// common case (one per request), and a closure in an array costs two allocations.
        private(set) var reply: (ReplyWaiter, BLIPResponse)?
        /// `reply != nil`, without copying the reply to find out (`perform` asks for every frame).
        private(set) var hasReply = false
        /// Let go of after the lock: their `deinit` may call back into the connection.
        var released: [any Sendable] = []
        var counts = Counts()

        /// Sets ``reply`` (for a `.whole` or `.callback` waiter), unless one is set already.
        mutating func deliver(_ response: BLIPResponse, to waiter: ReplyWaiter) -> Bool {
            guard !self.hasReply else { return false }
            self.reply = (waiter, response)
            self.hasReply = true
            return true
        }

        /// Takes ``reply`` out (nil if none).
        mutating func takeReply() -> (ReplyWaiter, BLIPResponse)? {
            self.hasReply = false
            return self.reply.take()
        }

        mutating func later(_ action: @escaping @Sendable () -> Void) {
            self.deferred.append(action)
        }
    }

    /// Metrics to bump after the lock (a metrics backend is the application's code).
    struct Counts {
        var messagesSent = 0
        var messagesReceived = 0
        var errorRepliesSent = 0
        var errorRepliesReceived = 0
        var unhandledRequests = 0
        var protocolErrors = 0
        var failedRequests = 0
    }

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
        self.router = router
        self.isSerial = router.handlerOrder == .serial
        var logger = logger
        logger[metadataKey: "blip.dialect"] = "\(transport.dialect)"
        self.logger = logger
        self.tracesFrames = logger.logLevel <= .trace
        self.metrics = ConnectionMetrics.forDialect(transport.dialect)
        self.requestTracer = RequestTracer(configuration.tracing)
        let engine = BLIPConnectionEngine(configuration: configuration.engineConfiguration(dialect: transport.dialect))
        self.state = CountingLockedValueBox(State(engine: engine))
        configuration.sharedBudget?.connectionOpened()
        (self.work, self.workContinuation) = AsyncStream.makeStream(of: Job.self)
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
        }
        if counts.protocolErrors > 0 { self.metrics.protocolErrors.increment(by: Int64(counts.protocolErrors)) }
        if counts.failedRequests > 0 { self.metrics.failedRequests.increment(by: Int64(counts.failedRequests)) }
    }

    /// Logs after the lock, if `level` is enabled; the message is only built then.
    func log(
        _ level: Logger.Level,
        _ message: @autoclosure () -> String,
        _ metadata: @autoclosure () -> Logger.Metadata = [:],
        effects: inout Effects
    ) {
        guard self.logger.logLevel <= level else { return }
        let text = message()
        let metadata = metadata()
        let logger = self.logger
        effects.later { logger.log(level: level, "\(text)", metadata: metadata) }
    }

    // MARK: - Lifecycle

    /// Runs handlers until the connection closes; handlers (and streamed reply bodies) still running then
    /// are cancelled, since their replies can no longer be sent. `scope`, the application's own work for
    /// the connection, runs as one more child, cancelled with them: one task group per connection, not
    /// two (an idle server connection's memory is mostly its tasks and groups).
    func run(scope: (@Sendable () async -> Void)? = nil) async -> BLIPCloseStatus {
        await withDiscardingTaskGroup { group in
            if let scope { group.addTask { await scope() } }
            for await job in self.work {
                switch job {
                case .handlers(let first):
                    let start = HandlerTaskStart(first)
                    group.addTask { await self.runHandlers(startingWith: start) }
                case .streamedReply(let head, let body): group.addTask { await body.send(self, head) }
                }
            }
            group.cancelAll()
        }
        return await self.closed()
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

    var statistics: BLIPConnectionStatistics {
        self.state.withLockedValue { state in
            var statistics = state.statistics
            let encoder = state.engine.encoderStatistics
            statistics.bytesBeforeCompression = encoder.bytesBeforeCompression
            statistics.bytesAfterCompression = encoder.bytesAfterCompression
            statistics.compressionSkipped = encoder.compressionSkipped
            statistics.sendWindow = state.engine.sendWindowSize
            statistics.bufferedIncomingBytes = self.bufferedBytes(state)
            return statistics
        }
    }

    /// Outstanding bookkeeping, for tests that check a connection leaves nothing behind: the count of
    /// callers, streams, buffered requests and messages the connection still tracks.
    var pendingBookkeeping: Int {
        self.state.withLockedValue { state -> Int in
            state.replyWaiters.count + state.sendWaiters.count + state.demandWaiters.count + state.tokens.count
                + state.tokenOfMessage.count + state.inbound.count + state.streams.count + state.unhandled.count
                + state.pendingWork.count + state.withheld.count + state.engine.outgoingCount
                + state.engine.awaitingReplyCount + state.engine.incomingCount + state.progress.count
                + state.replyProgress.count + state.cancelledTokens.count + state.engine.unansweredCount
                + state.drainWaiters.count + state.order.count + state.closesAfterReply.count
        }
    }

    /// The transport is gone: everything pending fails at once. A nil status is a normal close the
    /// transport says no more about: the end of the close this side asked for, or else the peer's.
    func transportClosed(_ status: BLIPCloseStatus?) {
        var effects = Effects()
        self.state.withLockedValue { state in
            let status =
                status
                ?? state.requestedClose.map { BLIPCloseStatus(code: $0.code, reason: $0.reason, initiator: .local) }
                ?? BLIPCloseStatus(code: .normalClosure, initiator: .peer)
            self.closeLocked(&state, status: status, error: self.connectionError(for: status), effects: &effects)
            state.finishingReplies = 0
            _ = state.engine.close()
        }
        self.perform(&effects)
    }

    /// Fails everything pending with `error` and ends the handler stream. Idempotent. With
    /// `finishingReplies`, the engine is kept so that replies already queued can still be written.
    func closeLocked(
        _ state: inout State,
        status: BLIPCloseStatus,
        error: BLIPConnectionError,
        effects: inout Effects,
        finishingReplies: Bool = false
    ) {
        guard !state.isClosed else { return }
        let error = {
            var error = error
            error.closeStatus = status
            return error
        }()
        state.closeError = error
        state.closeStatus = status
        if !finishingReplies { _ = state.engine.close() }
        self.log(.debug, "connection closed", ["blip.reason": "\(error)"], effects: &effects)
        var failed = state.replyWaiters.count
        for case .reply(_, let waiter) in state.inbound.values {
            Self.fail(waiter, error, effects: &effects)
            failed += 1
        }
        for waiter in state.replyWaiters.values { Self.fail(waiter, error, effects: &effects) }
        for waiter in state.sendWaiters.values { effects.later { waiter.resume(throwing: error) } }
        for waiter in state.demandWaiters.values { effects.later { waiter.resume(throwing: error) } }
        for id in state.streams.keys { self.failStream(&state, id, error, effects: &effects) }
        self.progressFailedAll(&state, effects: &effects)
        if let waiter = state.unhandledWaiter { effects.later { waiter.resume(returning: nil) } }
        for waiter in state.closeWaiters { effects.later { waiter.resume(returning: status) } }
        for waiter in state.drainWaiters.values { effects.later { waiter.resume() } }
        for idleTask in state.idleHandlerTasks { effects.later { idleTask.resume(returning: nil) } }
        state.idleHandlerTasks.removeAll()
        // Unanswered requests answer themselves when they go, and a request for a handler that will not
        // run holds a body stream: both call back into the connection, so they go after the lock.
        // Moved out whole (no copy: converting an empty Deque writes to the runtime's shared empty-array
        // storage, which ThreadSanitizer reports as a race between two connections closing at once).
        if !state.unhandled.isEmpty { effects.released.append(state.unhandled) }
        if !state.pendingWork.isEmpty { effects.released.append(state.pendingWork) }
        if !state.order.isEmpty { effects.released.append(state.order.removeAll()) }
        state.replyWaiters.removeAll()
        state.sendWaiters.removeAll()
        state.demandWaiters.removeAll()
        state.inbound.removeAll()
        state.unhandled.removeAll()
        state.pendingWork.removeAll()
        state.unhandledWaiter = nil
        state.closeWaiters.removeAll()
        state.drainWaiters.removeAll()
        state.closesAfterReply.removeAll()
        state.tokens.removeAll()
        state.tokenOfMessage.removeAll()
        state.withheld.removeAll()
        state.exempt = nil
        if let shared = self.configuration.sharedBudget {
            shared.subtract(state.buffered)
            shared.connectionClosed()
            shared.stopWaiting(ObjectIdentifier(self))
            let id = ObjectIdentifier(self)
            effects.later {
                shared.endExemption(id)
                shared.wakeIfRoom()
            }
        }
        state.buffered = 0
        state.assembling = 0
        effects.counts.failedRequests += failed
        let continuation = self.workContinuation
        effects.later { continuation.finish() }
    }

    static func fail(_ waiter: ReplyWaiter, _ error: any Error, effects: inout Effects) {
        switch waiter {
        case .whole(let continuation): effects.later { continuation.resume(throwing: error) }
        case .streamed(let continuation): effects.later { continuation.resume(throwing: error) }
        case .callback(let handler): effects.later { handler(.failure(error)) }
        }
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

    /// What pending requests fail with when the connection ends with `status`.
    func connectionError(for status: BLIPCloseStatus) -> BLIPConnectionError {
        if let underlying = status.underlying { return self.connectionError(from: underlying) }
        let reason = status.reason.isEmpty ? "" : ": \(status.reason)"
        switch status.initiator {
        case .peer:
            return BLIPConnectionError(closedByPeerWith: status.code, reason: status.reason)
                ?? BLIPConnectionError(.connectionClosed, "the peer closed the connection (\(status.code)\(reason))")
        case .local:
            return BLIPConnectionError(.connectionClosed, "the connection was closed (\(status.code)\(reason))")
        case .transport:
            return BLIPConnectionError(.transportFailed, "the connection was lost\(reason)")
        }
    }

    func connectionError(from error: any Error) -> BLIPConnectionError {
        if let error = error as? BLIPConnectionError { return error }
        if let error = error as? BLIPEngineError { return self.connectionError(from: error) }
        return BLIPConnectionError(.transportFailed, "\(error)", underlying: error)
    }

    func connectionError(from error: BLIPEngineError) -> BLIPConnectionError {
        switch error.code {
        case .protocolViolation: BLIPConnectionError(.protocolViolation, error.message, underlying: error)
        case .tooManyMessagesInFlight: BLIPConnectionError(.limitExceeded, error.message, underlying: error)
        case .closed: BLIPConnectionError(.connectionClosed, error.message, underlying: error)
        case .messageTooLarge: BLIPConnectionError(.messageTooLarge, error.message, underlying: error)
        case .invalidMessage, .unknownMessage, .noReplyExpected:
            BLIPConnectionError(.invalidMessage, error.message, underlying: error)
        case .bodyFailedMidMessage: BLIPConnectionError(.transportFailed, error.message, underlying: error)
        }
    }

    /// The close code for a fatal engine error: the peer's fault (1002 malformed or out of protocol, 1008
    /// over a limit, 1009 too large) or ours (1011).
    static func closeCode(for error: BLIPEngineError) -> BLIPCloseCode {
        switch error.code {
        case .protocolViolation: .protocolError
        case .tooManyMessagesInFlight: .policyViolation
        case .messageTooLarge: .messageTooBig
        case .closed, .invalidMessage, .unknownMessage, .noReplyExpected, .bodyFailedMidMessage: .internalError
        }
    }

    /// A fatal error in the engine: fail everything and close with the code that says who was wrong.
    /// After the peer's error (`byPeer`), replies already queued whole are still written first, up to
    /// 1 MiB: answers to its earlier, valid requests.
    func fatal(_ error: BLIPEngineError, byPeer: Bool, _ state: inout State, effects: inout Effects) {
        self.fatal(
            self.connectionError(from: error),
            closeCode: Self.closeCode(for: error),
            byPeer: byPeer,
            &state,
            effects: &effects
        )
    }

    func fatal(
        _ error: BLIPConnectionError,
        closeCode: BLIPCloseCode,
        byPeer: Bool,
        _ state: inout State,
        effects: inout Effects
    ) {
        guard !state.isClosed else { return }
        self.log(
            byPeer ? .error : .critical,
            byPeer ? "the peer broke the protocol" : "connection failed",
            ["blip.error": "\(error)"],
            effects: &effects
        )
        if byPeer {
            effects.counts.protocolErrors += 1
            state.engine.finishRepliesAfterFailure()
            state.finishingReplies = 1 << 20
            effects.wakeWriter = true
        }
        var reason = BLIPCloseReason(closeCode, String(error.message.prefix(120)))
        self.closeLocked(
            &state,
            status: BLIPCloseStatus(code: closeCode, reason: reason.reason, initiator: .local, underlying: error),
            error: error,
            effects: &effects,
            finishingReplies: byPeer
        )
        reason.finishesQueuedReplies = byPeer
        effects.closeTransport = reason
    }
}
