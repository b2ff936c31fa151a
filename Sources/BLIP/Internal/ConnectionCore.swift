internal import BLIPEngine
internal import BLIPWire
internal import CoreMetrics
internal import DequeModule
internal import Logging
internal import NIOConcurrencyHelpers
internal import NIOCore
internal import Synchronization

/// The shared heart of a connection: the engine behind one lock, with everything waiting on it
/// (callers of `sendRequest`, body streams, handlers). Every operation computes what to do under the lock
/// and does it (resuming continuations, waking the transport) after leaving it.
final class ConnectionCore: Sendable {
    let transport: any BLIPTransport
    let configuration: BLIPConnection.Configuration
    let router: BLIPRouter
    let logger: Logger
    let metrics: ConnectionMetrics
    /// Whether frame-level trace logging is on (checked once: the hot path should not ask per frame).
    let tracesFrames: Bool
    let state: NIOLockedValueBox<State>
    let nextToken = Atomic<UInt64>(1)
    /// Requests for handlers, consumed by ``run()``.
    let work: AsyncStream<Work>
    let workContinuation: AsyncStream<Work>.Continuation

    enum Work: Sendable {
        case handle(BLIPRequest, number: UInt64, expectsReply: Bool, BLIPRouter.Handler)
        case handleStreaming(BLIPStreamedRequest, number: UInt64, expectsReply: Bool, BLIPRouter.StreamingHandler)
    }

    enum ReplyWaiter {
        case whole(CheckedContinuation<BLIPResponse, any Error>)
        case streamed(CheckedContinuation<BLIPStreamedResponse, any Error>)
    }

    /// An incoming message between its first and last frame.
    enum Inbound {
        /// A request to hand to a handler (or to the incoming-requests sequence) once complete.
        case request(BLIPIncomingMessage, body: ByteBuffer, route: BLIPRouter.Route?)
        /// A reply (or ERR) its caller waits for whole.
        case reply(BLIPIncomingMessage, body: ByteBuffer, waiter: ReplyWaiter)
        /// Read by a body stream.
        case streamed
        /// Nobody wants the rest (answered already, or its caller gave up).
        case discarded
    }

    struct BodyStreamState {
        var chunks: Deque<ByteBuffer> = []
        var isComplete = false
        var failure: (any Error)?
        var waiter: CheckedContinuation<ByteBuffer?, any Error>?
    }

    /// Only ever touched under the connection's lock (the engine is not thread-safe).
    struct State: @unchecked Sendable {
        let engine: BLIPConnectionEngine
        var replyWaiters: [BLIPOutgoingID: ReplyWaiter] = [:]
        /// No-reply requests whose sender waits for the last frame to leave.
        var sendWaiters: [BLIPOutgoingID: CheckedContinuation<Void, any Error>] = [:]
        /// Streamed bodies waiting for room to add more.
        var demandWaiters: [BLIPOutgoingID: CheckedContinuation<Void, any Error>] = [:]
        /// Callers' tokens, so that a cancellation finds its message (and back, to forget them).
        var tokens: [UInt64: BLIPOutgoingID] = [:]
        var tokenOfMessage: [BLIPOutgoingID: UInt64] = [:]
        var cancelledTokens: Set<UInt64> = []
        var inbound: [BLIPIncomingID: Inbound] = [:]
        var streams: [BLIPIncomingID: BodyStreamState] = [:]
        var unhandled: Deque<BLIPIncomingRequest> = []
        var unhandledWaiter: CheckedContinuation<BLIPIncomingRequest?, Never>?
        var activeHandlers = 0
        var readingPaused = false
        var closeError: BLIPConnectionError?
        var closeWaiters: [CheckedContinuation<Void, Never>] = []
        var statistics = BLIPConnectionStatistics()
    }

    /// What to do after leaving the lock.
    struct Effects {
        var wakeWriter = false
        var closeTransport: BLIPCloseReason?
        var pauseReading = false
        var resumeReading = false
        var work: Work?
        var deferred: [@Sendable () -> Void] = []

        mutating func later(_ action: @escaping @Sendable () -> Void) {
            self.deferred.append(action)
        }
    }

    init(
        transport: any BLIPTransport,
        configuration: BLIPConnection.Configuration,
        router: BLIPRouter,
        logger: Logger
    ) {
        self.transport = transport
        self.configuration = configuration
        self.router = router
        var logger = logger
        logger[metadataKey: "blip.dialect"] = "\(transport.dialect)"
        self.logger = logger
        self.tracesFrames = logger.logLevel <= .trace
        self.metrics = ConnectionMetrics(dialect: transport.dialect)
        let engine = BLIPConnectionEngine(
            configuration: configuration.engineConfiguration(
                dialect: transport.dialect,
                streamsRequestBodies: router.hasStreamingHandlers
            )
        )
        self.state = NIOLockedValueBox(State(engine: engine))
        (self.work, self.workContinuation) = AsyncStream.makeStream(of: Work.self)
    }

    func start() {
        self.transport.start(BLIPTransportSink(core: self))
    }

    func perform(_ effects: Effects) {
        if let work = effects.work { self.workContinuation.yield(work) }
        for action in effects.deferred { action() }
        if effects.pauseReading { self.transport.pauseReading() }
        if effects.resumeReading { self.transport.resumeReading() }
        if let reason = effects.closeTransport {
            self.transport.close(reason)
        } else if effects.wakeWriter {
            self.transport.wakeWriter()
        }
    }

    // MARK: - Lifecycle

    /// Runs handlers until the connection closes; handlers still running then are cancelled, since their
    /// replies can no longer be sent.
    func run() async {
        await withDiscardingTaskGroup { group in
            for await item in self.work {
                group.addTask { await self.handle(item) }
            }
            group.cancelAll()
        }
    }

    /// Closes the connection normally and waits until it is closed.
    func close() async {
        let alreadyClosed = self.state.withLockedValue { $0.closeError != nil }
        if !alreadyClosed { self.transport.close(.normal) }
        await withCheckedContinuation { (continuation: CheckedContinuation<Void, Never>) in
            let closed = self.state.withLockedValue { state -> Bool in
                guard state.closeError == nil else { return true }
                state.closeWaiters.append(continuation)
                return false
            }
            if closed { continuation.resume() }
        }
    }

    var isClosed: Bool { self.state.withLockedValue { $0.closeError != nil } }

    var stateDescription: String { self.state.withLockedValue { $0.engine.debugDescription } }

    var statistics: BLIPConnectionStatistics {
        self.state.withLockedValue { state in
            var statistics = state.statistics
            let encoder = state.engine.encoderStatistics
            statistics.bytesBeforeCompression = encoder.bytesBeforeCompression
            statistics.bytesAfterCompression = encoder.bytesAfterCompression
            statistics.compressionSkipped = encoder.compressionSkipped
            statistics.sendWindow = state.engine.sendWindowSize
            return statistics
        }
    }

    /// The transport is gone: everything pending fails at once.
    func transportClosed(_ error: (any Error)?) {
        var effects = Effects()
        self.state.withLockedValue { state in
            let reason =
                error.map { self.connectionError(from: $0) }
                ?? BLIPConnectionError(.connectionClosed, "the connection closed")
            self.closeLocked(&state, error: reason, effects: &effects)
        }
        self.perform(effects)
    }

    /// Fails everything pending with `error` and ends the handler stream. Idempotent.
    func closeLocked(_ state: inout State, error: BLIPConnectionError, effects: inout Effects) {
        guard state.closeError == nil else { return }
        state.closeError = error
        let closure = state.engine.close()
        self.logger.debug("connection closed", metadata: ["blip.reason": "\(error)"])
        let replyWaiters = state.replyWaiters.values
        for case .reply(_, _, let waiter) in state.inbound.values {
            Self.fail(waiter, error, effects: &effects)
        }
        for waiter in replyWaiters { Self.fail(waiter, error, effects: &effects) }
        for waiter in state.sendWaiters.values { effects.later { waiter.resume(throwing: error) } }
        for waiter in state.demandWaiters.values { effects.later { waiter.resume(throwing: error) } }
        for id in state.streams.keys { Self.failStream(&state, id, error, effects: &effects) }
        if let waiter = state.unhandledWaiter { effects.later { waiter.resume(returning: nil) } }
        for waiter in state.closeWaiters { effects.later { waiter.resume() } }
        state.replyWaiters.removeAll()
        state.sendWaiters.removeAll()
        state.demandWaiters.removeAll()
        state.inbound.removeAll()
        state.unhandled.removeAll()
        state.unhandledWaiter = nil
        state.closeWaiters.removeAll()
        state.tokens.removeAll()
        state.tokenOfMessage.removeAll()
        self.metrics.failedRequests.increment(by: Int64(closure.failedRequests.count))
        let continuation = self.workContinuation
        effects.later { continuation.finish() }
    }

    static func fail(_ waiter: ReplyWaiter, _ error: any Error, effects: inout Effects) {
        switch waiter {
        case .whole(let continuation): effects.later { continuation.resume(throwing: error) }
        case .streamed(let continuation): effects.later { continuation.resume(throwing: error) }
        }
    }

    func connectionError(from error: any Error) -> BLIPConnectionError {
        if let error = error as? BLIPConnectionError { return error }
        if let error = error as? BLIPEngineError { return self.connectionError(from: error) }
        return BLIPConnectionError(.transportFailed, "\(error)", underlying: error)
    }

    func connectionError(from error: BLIPEngineError) -> BLIPConnectionError {
        switch error.code {
        case .protocolViolation, .tooManyMessagesInFlight:
            BLIPConnectionError(.protocolViolation, error.message, underlying: error)
        case .closed: BLIPConnectionError(.connectionClosed, error.message, underlying: error)
        case .messageTooLarge: BLIPConnectionError(.messageTooLarge, error.message, underlying: error)
        case .invalidMessage, .unknownMessage, .noReplyExpected:
            BLIPConnectionError(.invalidMessage, error.message, underlying: error)
        case .bodyFailedMidMessage: BLIPConnectionError(.transportFailed, error.message, underlying: error)
        }
    }

    /// A fatal error in the engine: close with 1011 and fail everything.
    func fatal(_ error: BLIPEngineError, _ state: inout State, effects: inout Effects) {
        let connectionError = self.connectionError(from: error)
        self.logger.error("protocol violation", metadata: ["blip.error": "\(error)"])
        self.metrics.protocolErrors.increment()
        self.closeLocked(&state, error: connectionError, effects: &effects)
        effects.closeTransport = .protocolViolation(String(error.message.prefix(120)))
    }
}
