internal import BLIPEngine
package import BLIPWire
internal import Logging
package import NIOCore

/// A connection with no I/O and no tasks, driven one step at a time by a harness or a fuzzer
/// (BLIPPeerHarness's connection-pair simulation, the `connection` fuzz target).
///
/// Every step runs the connection's production rules, the same code a running connection runs: body
/// assembly, the buffer budget and ACK withholding, handler slots and serial order, draining, reply
/// bookkeeping, closing. Only the edges are the harness's: it moves frames (pulling one only after the
/// connection asked to be written, delivering one only while reading is not paused), runs the handlers it
/// is handed when it likes, and carries out closes. One thread steps a connection at a time.
package final class BLIPSteppedConnection: @unchecked Sendable {
    /// A handler the connection started (profiles ``heldProfile`` and ``streamingProfile``), running until
    /// the harness finishes it.
    package struct HandlerCall: Sendable {
        /// The request; a streamed one's body is empty here, and read with ``readBody(of:)``.
        package let request: BLIPRequest
        package let number: UInt64
        package let expectsReply: Bool
        package var isStreamed: Bool { self.stream != nil }
        fileprivate let charge: Int
        /// A streamed request, kept while its handler runs: dropping it lets go of its body stream.
        fileprivate let stream: BLIPStreamedRequest?
    }

    /// What reading a streamed request's body without waiting found.
    package enum BodyRead: Sendable {
        case piece(ByteBuffer)
        case end
        case failed(any Error)
        /// Nothing has arrived since the last read.
        case nothingYet
    }

    /// A request the harness sent; the handle to cancel it by.
    package struct SentRequest: Hashable, Sendable {
        fileprivate let id: BLIPOutgoingID
    }

    /// Requests with this profile start a handler the harness finishes (``finishHandler(_:with:)``).
    package static let heldProfile = "held"
    /// Requests with this profile start a handler given the body as a stream, read with ``readBody(of:)``.
    package static let streamingProfile = "streaming"
    /// Requests with this profile are answered at once, where they arrive, by a synchronous handler
    /// echoing their properties and body.
    package static let echoProfile = "echo"

    let core: ConnectionCore
    private let transport: SteppedTransport
    private let jobs: JobInbox
    private let sink: BLIPTransportSink
    /// Handlers started and not finished, in the order they started.
    package var running: [HandlerCall] {
        self.collectJobs()
        return self.runningCalls
    }
    private var runningCalls: [HandlerCall] = []
    /// Request numbers in the order their handlers started (held and echo), for checking serial order.
    package var started: [UInt64] { self.jobs.started }

    package init(
        dialect: BLIPDialect,
        configuration: BLIPConnection.Configuration,
        handlerOrder: BLIPRouter.HandlerOrder
    ) {
        let jobs = JobInbox()
        var router = BLIPRouter(handlerOrder: handlerOrder)
        router.register(profile: Self.heldProfile) { _, _ in
            preconditionFailure("a stepped connection's handlers are run by its harness")
        }
        router.registerStreaming(profile: Self.streamingProfile) { _, _ in
            preconditionFailure("a stepped connection's handlers are run by its harness")
        }
        router.registerSynchronous(profile: Self.echoProfile) { request, context in
            jobs.started.append(context.requestNumber)
            return BLIPResponse(properties: request.properties, body: request.body)
        }
        self.jobs = jobs
        self.transport = SteppedTransport(dialect: dialect)
        var logger = Logger(label: "blip.stepped")
        logger.logLevel = .critical
        self.core = ConnectionCore(
            transport: self.transport,
            configuration: configuration,
            router: router,
            logger: logger,
            jobSink: { jobs.take($0) }
        )
        self.sink = BLIPTransportSink(core: self.core)
        self.core.start()
    }

    // MARK: - The application's side

    /// Sends a request whose reply (or failure) goes to `onReply`, once, and its progress to `progress`;
    /// nil if it failed at once.
    package func send(
        _ request: BLIPRequest,
        progress: BLIPProgressHandler? = nil,
        onReply: @escaping BLIPReplyHandler
    ) -> SentRequest? {
        let reporter = progress.map { ProgressReporter(expectsReply: true, $0) }
        return self.core.sendRequest(request, progress: reporter, onReply: onReply).map(SentRequest.init)
    }

    /// Queues a no-reply request; false if it failed at once (the connection is closed).
    package func sendNoReply(_ request: BLIPRequest) -> Bool {
        let message = self.core.outgoing(request, body: .buffer(request.body), isNoReply: true)
        var effects = ConnectionStateMachine.Effects()
        let queued = self.core.state.withLockedValue { state -> Bool in
            guard case .success = state.enqueue(message, token: nil, progress: nil, effects: &effects)
            else { return false }
            return true
        }
        self.core.perform(&effects)
        self.collectJobs()
        return queued
    }

    /// Gives up a request, as a cancelled caller does.
    package func cancel(_ request: SentRequest) {
        self.core.cancelReply(to: request.id, with: CancellationError())
        self.collectJobs()
    }

    /// Reads what has arrived of a streamed request's body, as its handler's body stream would.
    package func readBody(of call: HandlerCall) -> BodyRead {
        defer { self.collectJobs() }
        switch self.core.takeReadyChunk(of: BLIPIncomingID(isRequest: true, number: call.number)) {
        case .success(let piece?): return .piece(piece)
        case .success(nil): return .end
        case .failure(let error): return .failed(error)
        case nil: return .nothingYet
        }
    }

    /// Gives up a request whose time ran out, as its deadline's timer does.
    package func timeOut(_ request: SentRequest) {
        self.core.cancelReply(to: request.id, with: BLIPConnectionError(.timedOut, "no reply within its deadline"))
        self.collectJobs()
    }

    /// Ends a running handler with its reply (or ERR), as a handler task does; the slot goes to the
    /// request waiting longest, whose handler then runs.
    package func finishHandler(_ call: HandlerCall, with result: Result<BLIPResponse, BLIPError>) {
        guard let index = self.running.firstIndex(where: { $0.number == call.number }) else { return }
        self.runningCalls.remove(at: index)
        if call.expectsReply { self.core.respond(to: call.number, with: result) }
        var effects = ConnectionStateMachine.Effects()
        let next = self.core.state.withLockedValue {
            $0.handlerFinished(charge: call.charge, effects: &effects)
        }
        self.core.perform(&effects)
        if let next { self.jobs.take(.handlers(startingWith: next)) }
        self.collectJobs()
    }

    /// Takes the oldest request no handler took (``BLIPConnection/UnhandledRequestPolicy/deliver``), as
    /// ``BLIPConnection/incomingRequests`` does.
    package func takeUnhandledRequest() -> BLIPIncomingRequest? {
        let request = self.core.takeUnhandledRequest()
        self.collectJobs()
        return request
    }

    /// Starts a graceful close's drain: requests that expect a reply are refused from now on.
    package func beginGracefulClose() {
        self.core.state.withLockedValue { $0.isDraining = true }
    }

    /// Asks for the connection to close, as ``BLIPConnection/close(code:reason:)`` does; the harness then
    /// carries the close out (``closeRequest``).
    package func close(_ code: BLIPCloseCode) {
        let isOpen = self.core.state.withLockedValue { state -> Bool in
            guard !state.isClosed else { return false }
            if state.requestedClose == nil { state.requestedClose = BLIPCloseReason(code) }
            return true
        }
        if isOpen { self.transport.close(BLIPCloseReason(code)) }
    }

    // MARK: - The transport's side

    /// Whether the connection asked to be written since a pull last found no more frames ready.
    package var wantsToWrite: Bool { self.transport.wantsToWrite }
    /// Whether the connection asked the transport not to read.
    package var isReadingPaused: Bool { self.transport.isReadingPaused }
    /// The close the connection asked the transport for, if any.
    package var closeRequest: BLIPCloseReason? { self.transport.closeRequest }

    /// The next frame the connection has to send, as a transport pulls it once woken.
    package func pullFrame() -> ByteBuffer? {
        var buffer = ByteBuffer()
        let pulled = self.core.pullFrame(into: &buffer)
        if pulled != .frameWithMoreReady { self.transport.wantsToWrite = false }
        self.collectJobs()
        return pulled == .none ? nil : buffer
    }

    /// A frame from the peer.
    package func receive(_ frame: ByteBuffer) {
        self.sink.received(frame)
        self.collectJobs()
    }

    /// The network's room changed (a full socket buffer, or room again), as a channel's writability.
    package func writabilityChanged(_ isWritable: Bool) {
        self.sink.writabilityChanged(isWritable)
        self.collectJobs()
    }

    /// The transport closed with `status` (nil: the close this side asked for, or the peer's normal one).
    package func transportClosed(_ status: BLIPCloseStatus?) {
        if let status { self.sink.closed(status) } else { self.sink.closed(nil as (any Error)?) }
        self.collectJobs()
    }

    // MARK: - What the harness checks

    package var closeStatus: BLIPCloseStatus? { self.core.closeStatus }
    package var statistics: BLIPConnectionStatistics { self.core.statistics }
    /// Callers, streams, buffered requests and messages the connection still tracks (0 when it holds none).
    package var pendingBookkeeping: Int { self.core.pendingBookkeeping }
    /// Nothing in flight either way, no handler running or waiting, no request owing a reply.
    package var isQuiet: Bool { self.core.state.withLockedValue { $0.isQuiet() } }
    /// The connection's state, for a failure's report.
    package var stateDescription: String {
        self.core.state.withLockedValue { state in
            let shared = self.core.configuration.sharedBudget.map { " shared budget \($0.bytes) of \($0.limit);" } ?? ""
            return shared
                + "engine: \(state.engine.debugDescription); handlers running \(state.runningHandlers), waiting "
                + "\(state.pendingWork.count), in serial order \(state.order.count), unhandled \(state.unhandled.count), "
                + "inbound \(state.inbound.count), reply waiters \(state.replyWaiters.count), withheld \(state.withheld.count), "
                + "draining \(state.isDraining), paused \(state.readingPaused) (backlog \(state.pausedForBacklog), "
                + "replies \(state.pausedForReplies), shared budget \(state.pausedForSharedBudget)); engine outgoing "
                + "\(state.engine.outgoingCount), awaiting replies \(state.engine.awaitingReplyCount), incoming "
                + "\(state.engine.incomingCount), unanswered \(state.engine.unansweredCount), tokens \(state.tokens.count)"
        }
    }
    /// What it holds against its buffer budget.
    package var bufferedBytes: Int { self.core.state.withLockedValue { $0.bufferedBytes() } }

    /// Moves handlers started by the last step into ``running``.
    private func collectJobs() {
        guard !self.jobs.pending.isEmpty else { return }
        let jobs = self.jobs.pending
        self.jobs.pending.removeAll()
        for job in jobs {
            switch job {
            case .handlers(let work):
                switch work {
                case .handle(let request, let number, let expectsReply, let charge, _):
                    self.runningCalls.append(
                        HandlerCall(
                            request: request,
                            number: number,
                            expectsReply: expectsReply,
                            charge: charge,
                            stream: nil
                        )
                    )
                case .handleStreaming(let streamed, let number, let expectsReply, _):
                    let request = BLIPRequest(
                        properties: streamed.properties,
                        urgent: streamed.isUrgent,
                        compressed: streamed.isCompressed
                    )
                    self.runningCalls.append(
                        HandlerCall(
                            request: request,
                            number: number,
                            expectsReply: expectsReply,
                            charge: 0,
                            stream: streamed
                        )
                    )
                }
            case .streamedReply:
                preconditionFailure("a stepped connection's handlers reply whole")
            }
        }
    }
}

/// Jobs the connection handed out during a step, and the order handlers started in.
private final class JobInbox: @unchecked Sendable {
    var pending: [ConnectionCore.Job] = []
    var started: [UInt64] = []

    func take(_ job: ConnectionCore.Job) {
        switch job {
        case .handlers(.handle(_, let number, _, _, _)), .handlers(.handleStreaming(_, let number, _, _)):
            self.started.append(number)
        case .streamedReply: break
        }
        self.pending.append(job)
    }
}

/// The transport's calls, recorded for the harness to act on.
private final class SteppedTransport: BLIPTransport, @unchecked Sendable {
    let dialect: BLIPDialect
    var wantsToWrite = false
    var isReadingPaused = false
    var closeRequest: BLIPCloseReason?

    init(dialect: BLIPDialect) {
        self.dialect = dialect
    }

    func start(_ sink: BLIPTransportSink) {}
    func wakeWriter() { self.wantsToWrite = true }
    func pauseReading() { self.isReadingPaused = true }
    func resumeReading() { self.isReadingPaused = false }
    func close(_ reason: BLIPCloseReason) {
        if self.closeRequest == nil { self.closeRequest = reason }
    }
}
