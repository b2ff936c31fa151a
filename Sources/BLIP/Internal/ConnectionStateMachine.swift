internal import BLIPEngine
internal import BLIPWire
internal import DequeModule
internal import Logging
internal import NIOCore

/// Everything a connection decides, as one value: the engine, body assembly, the buffer budget and ACK
/// withholding, handler slots and serial order, draining and graceful close, caller tokens and progress.
///
/// Every event is a `mutating` method that changes the state and says in ``Effects`` what must happen
/// next: waiters to resume, the transport to wake, pause or close, handlers to start, logs and counts.
/// It never does any of that itself, and it never takes a lock: ``ConnectionCore`` holds it behind one
/// lock, calls one event per acquisition and performs the effects after leaving the lock, so nothing of
/// the application's ever runs while the lock is held. The waiters (continuations and reply callbacks)
/// are kept here and handed out in the effects that resume them, as in SwiftNIO's own async sequences.
struct ConnectionStateMachine: @unchecked Sendable {
    let configuration: BLIPConnection.Configuration
    let router: BLIPRouter
    /// `router.handlerOrder == .serial`, read once (asked for every request).
    let isSerial: Bool
    let logger: Logger
    /// The connection these decisions are for: the handles the machine gives out (incoming requests, body
    /// streams) call back into it, and it names the connection in the shared budget. Unowned: the
    /// connection owns the machine. Set once, right after the connection is made (see ``owner``).
    unowned var ownerReference: ConnectionCore?
    var owner: ConnectionCore { self.ownerReference! }

    /// `engine` is `configuration.engineConfiguration(dialect:)`, made once by the core, which keeps its encoder's
    /// settings to gzip large bodies before the lock.
    init(
        configuration: BLIPConnection.Configuration,
        engine: BLIPEngineConfiguration,
        router: BLIPRouter,
        logger: Logger
    ) {
        self.configuration = configuration
        self.router = router
        self.isSerial = router.handlerOrder == .serial
        self.logger = logger
        self.engine = BLIPConnectionEngine(configuration: engine)
    }

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
    /// Bytes the peer makes us hold (see ConnectionStateMachine+Backpressure), and those of whole messages
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
    /// ConnectionStateMachine+Progress).
    var progress: [BLIPOutgoingID: ProgressReporter] = [:]
    var replyProgress: [BLIPIncomingID: ReplyProgress] = [:]
    /// The last profile looked up in the router, and what it found (the router never changes).
    var lastRoute: (profile: String, route: BLIPRouter.Route?)?
    /// A graceful close is under way: new requests that expect a reply get ERR BLIP/503.
    var isDraining = false
    /// Graceful closes waiting for nothing to be in flight, by token.
    var drainWaiters: [UInt64: WaiterContinuation<Void, Never>] = [:]

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
        /// The connection closed: no more handler jobs (``ConnectionCore/run(scope:)`` returns).
        var finishJobs = false
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
}
