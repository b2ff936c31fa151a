public import BLIPWire
public import Logging
public import NIOCore

/// One BLIP connection: send requests to the peer and answer its requests.
///
/// Open one over a transport with ``withBLIPConnection(over:configuration:router:logger:identity:isolation:_:)``
/// (scoped to a closure), or with ``init(transport:configuration:router:logger:identity:)`` and ``run()`` for a
/// server that keeps it open. Every request resolves exactly once: its reply, a thrown ``BLIPError`` (an ERR
/// reply), or a thrown ``BLIPConnectionError`` (the connection failed or closed first).
public struct BLIPConnection: Sendable, Hashable {
    let core: ConnectionCore

    /// Connections are equal when they are the same connection.
    public static func == (lhs: BLIPConnection, rhs: BLIPConnection) -> Bool { lhs.core === rhs.core }
    public func hash(into hasher: inout Hasher) { hasher.combine(ObjectIdentifier(self.core)) }

    init(core: ConnectionCore) {
        self.core = core
    }

    /// Starts a connection over `transport`. Its handlers run while ``run()`` does. `identity` is whatever
    /// the application wants every handler of this connection to see (the user a server authenticated,
    /// the database the connection is for); see ``identity``.
    public init(
        transport: some BLIPTransport,
        configuration: Configuration = Configuration(),
        router: BLIPRouter = BLIPRouter(),
        logger: Logger = Logger(label: "blip"),
        identity: (any Sendable)? = nil
    ) {
        self.core = ConnectionCore(
            transport: transport,
            configuration: configuration,
            router: router,
            logger: logger,
            identity: identity
        )
        self.core.start()
    }

    /// The value the application attached when the connection was opened or accepted (for a server, what
    /// its upgrade handler returned), or nil.
    public var identity: (any Sendable)? { self.core.identity }

    /// ``identity`` as a `T`, or nil when it is absent or of another type.
    public func identity<T: Sendable>(as type: T.Type) -> T? { self.core.identity as? T }

    /// The transport, for the transport's own module to add what it knows (the WebSocket handshake).
    package var transport: any BLIPTransport { self.core.transport }

    /// The transport's own thread as a task executor (a WebSocket connection's event loop); nil for a
    /// transport without one.
    ///
    /// Code that talks mostly to this connection can run on it: `withTaskExecutorPreference(connection
    /// .taskExecutor) { … }` starts the body there, and each reply resumes it in the same turn of the loop
    /// that read the reply, with no other thread woken either way (64 small requests in flight: 1.1x to
    /// 1.8x on loopback; see Docs/BenchmarkLog.md). The body must not block or compute for long: the loop's
    /// other connections wait meanwhile. Like any executor built on NIO event loops, it needs its event loop
    /// group running: work queued after the group has shut down is dropped (the default group, NIO's
    /// singleton, never shuts down).
    public var taskExecutor: (any TaskExecutor)? { self.core.transport.taskExecutor }

    /// The wire dialect in use.
    public var dialect: BLIPDialect { self.core.transport.dialect }

    /// What has crossed the wire so far.
    public var statistics: BLIPConnectionStatistics { self.core.statistics }

    /// How often the connection's lock has been taken: the figure behind locks per message.
    package var lockAcquisitions: UInt64 { self.core.state.acquisitions }

    /// The protocol state: every unfinished message with its flow-control counters. For diagnosing a
    /// connection that waits for something; the format is for people, not for parsing.
    public var stateDescription: String { self.core.stateDescription }

    /// Whether the connection has closed.
    public var isClosed: Bool { self.core.isClosed }

    /// How the connection ended; nil while it is open.
    public var closeStatus: BLIPCloseStatus? { self.core.closeStatus }

    /// Runs the connection's handlers until it closes, and says how it ended.
    @discardableResult
    public func run() async -> BLIPCloseStatus {
        await self.core.run()
    }

    /// Waits until the connection has closed (however that happens) and says how it ended. Returns at once
    /// if it has closed already.
    @discardableResult
    public func closed() async -> BLIPCloseStatus {
        await self.core.closed()
    }

    /// Closes the connection with `code` and `reason` and waits until it is closed; everything still
    /// pending fails with ``BLIPConnectionError/Code/connectionClosed``, carrying the returned status.
    /// Returns the earlier status if the connection had closed already.
    ///
    /// - Parameters:
    ///   - code: 1000 (the default) when the work is done, 1001 when going away (shutting down), 1008 for
    ///     a peer that broke the application's rules, or an application code in 4000-4999. Must be
    ///     ``BLIPCloseCode/isSendable``.
    ///   - reason: Sent in the close frame; cut to its first 123 bytes (whole characters).
    @discardableResult
    public func close(code: BLIPCloseCode = .normalClosure, reason: String = "") async -> BLIPCloseStatus {
        precondition(code.isSendable, "close code \(code) cannot be sent (RFC 6455 7.4)")
        return await self.core.close(BLIPCloseReason(code, Self.closeFrameReason(reason)))
    }

    /// The longest prefix of `reason` that fits a close frame (123 bytes) without splitting a character.
    static func closeFrameReason(_ reason: String) -> String {
        guard reason.utf8.count > 123 else { return reason }
        var prefix = Substring(reason)
        while prefix.utf8.count > 123 { prefix = prefix.dropLast() }
        return String(prefix)
    }

    /// Sends a request and waits for its reply. Throws ``BLIPError`` for an ERR reply. Cancelling the task
    /// abandons the reply: a request not yet started is never sent, one already started is sent whole
    /// (BLIP cannot abort a message) and its reply is dropped.
    ///
    /// - Parameter request: The request; its `Profile` property says what it is for.
    /// - Parameter timeout: How long to wait for the reply (nil: ``Configuration/requestTimeout``). Past
    ///   it the request is cancelled as above and this throws ``BLIPConnectionError/Code/timedOut``.
    /// - Parameter progress: Told where the request is as it goes, up to a final report
    ///   (``BLIPMessageProgress``).
    public func sendRequest(
        _ request: BLIPRequest,
        timeout: Duration? = nil,
        progress: BLIPProgressHandler? = nil
    ) async throws -> BLIPResponse {
        let reporter = progress.map { ProgressReporter(expectsReply: true, $0) }
        guard let tracer = self.core.requestTracer else {
            return try await self.core.sendRequest(request, timeout: timeout, progress: reporter)
        }
        return try await tracer.traceSent(request, facts: .sent(request), replySize: \.tracedSize) { request in
            try await self.core.sendRequest(request, timeout: timeout, progress: reporter)
        }
    }

    /// Sends a request whose body is produced as it goes (a 1 GiB body never has to sit in memory), and
    /// waits for the reply. The body is pulled only as fast as the connection sends it.
    ///
    /// - Parameter request: The request's properties, urgency and compression; its own body is not sent.
    /// - Parameter body: The body's pieces, read as the connection can send them.
    /// - Parameter timeout: As for ``sendRequest(_:timeout:progress:)``. The body is cancelled if it is
    ///   still being produced then: before its first frame left, nothing is sent; after, the connection
    ///   closes (1011), since BLIP cannot abort a message.
    /// - Parameter progress: As for ``sendRequest(_:timeout:progress:)``.
    public func sendRequest<Body: AsyncSequence & Sendable>(
        _ request: BLIPRequest,
        body: Body,
        timeout: Duration? = nil,
        progress: BLIPProgressHandler? = nil
    ) async throws -> BLIPResponse where Body.Element == ByteBuffer {
        let reporter = progress.map { ProgressReporter(expectsReply: true, $0) }
        guard let tracer = self.core.requestTracer else {
            return try await self.core.sendRequest(request, body: body, timeout: timeout, progress: reporter)
        }
        var facts = RequestTracer.RequestFacts.sent(request)
        facts.size = nil
        let sent = ByteCounter()
        return try await tracer.traceSent(request, facts: facts, replySize: \.tracedSize, sentBytes: sent) { request in
            try await self.core.sendRequest(request, body: sent.counting(body), timeout: timeout, progress: reporter)
        }
    }

    /// Sends a request and returns its reply as soon as the reply's properties arrive, with its body as a
    /// stream; the peer is held back while the body is not read. Throws ``BLIPError`` for an ERR reply.
    ///
    /// - Parameter request: The request.
    /// - Parameter timeout: How long to wait for the reply's properties; reading the body is not timed.
    /// - Parameter progress: As for ``sendRequest(_:timeout:progress:)``; reports go on after this returns,
    ///   until the reply's last frame has arrived (not until it is read). Dropping the body before then
    ///   ends them with ``BLIPMessageProgress/State/failed``.
    public func sendRequestStreamingReply(
        _ request: BLIPRequest,
        timeout: Duration? = nil,
        progress: BLIPProgressHandler? = nil
    ) async throws -> BLIPStreamedResponse {
        let reporter = progress.map { ProgressReporter(expectsReply: true, $0) }
        guard let tracer = self.core.requestTracer else {
            return try await self.core.sendRequestStreamingReply(request, timeout: timeout, progress: reporter)
        }
        return try await tracer.traceSent(request, facts: .sent(request)) { request in
            try await self.core.sendRequestStreamingReply(request, timeout: timeout, progress: reporter)
        }
    }

    /// Sends a request that must not be answered; returns once its last frame has been handed to the
    /// transport.
    ///
    /// - Parameter request: The request.
    /// - Parameter timeout: How long sending may take; past it a request not yet started is dropped.
    /// - Parameter progress: As for ``sendRequest(_:timeout:progress:)``; the request is complete once its
    ///   last frame has left.
    public func sendNoReply(
        _ request: BLIPRequest,
        timeout: Duration? = nil,
        progress: BLIPProgressHandler? = nil
    ) async throws {
        let reporter = progress.map { ProgressReporter(expectsReply: false, $0) }
        guard let tracer = self.core.requestTracer else {
            return try await self.core.sendNoReply(request, timeout: timeout, progress: reporter)
        }
        var facts = RequestTracer.RequestFacts.sent(request)
        facts.expectsReply = false
        try await tracer.traceSent(request, facts: facts) { request in
            try await self.core.sendNoReply(request, timeout: timeout, progress: reporter)
        }
    }

    /// Requests whose `Profile` no handler serves, when the configuration delivers them
    /// (``UnhandledRequestPolicy/deliver``). Each must be answered.
    public var incomingRequests: BLIPIncomingRequests {
        BLIPIncomingRequests(core: self.core)
    }
}
