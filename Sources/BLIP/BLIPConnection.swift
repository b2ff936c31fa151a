public import BLIPWire
public import Logging
public import NIOCore

/// One BLIP connection: send requests to the peer and answer its requests.
///
/// Open one over a transport with ``withBLIPConnection(over:configuration:router:logger:_:)`` (scoped to a
/// closure), or with ``init(transport:configuration:router:logger:)`` and ``run()`` for a server that keeps
/// it open. Every request resolves exactly once: its reply, a thrown ``BLIPError`` (an ERR reply), or a
/// thrown ``BLIPConnectionError`` (the connection failed or closed first).
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

    /// The wire dialect in use.
    public var dialect: BLIPDialect { self.core.transport.dialect }

    /// What has crossed the wire so far.
    public var statistics: BLIPConnectionStatistics { self.core.statistics }

    /// The protocol state: every unfinished message with its flow-control counters. For diagnosing a
    /// connection that waits for something; the format is for people, not for parsing.
    public var stateDescription: String { self.core.stateDescription }

    /// Whether the connection has closed.
    public var isClosed: Bool { self.core.isClosed }

    /// Runs the connection's handlers until it closes. Returns once it has.
    public func run() async {
        await self.core.run()
    }

    /// Closes the connection normally (WebSocket close 1000) and waits until it is closed; everything
    /// still pending fails with ``BLIPConnectionError/Code/connectionClosed``.
    public func close() async {
        await self.core.close()
    }

    /// Sends a request and waits for its reply. Throws ``BLIPError`` for an ERR reply. Cancelling the task
    /// abandons the reply: a request not yet started is never sent, one already started is sent whole
    /// (BLIP cannot abort a message) and its reply is dropped.
    public func sendRequest(_ request: BLIPRequest) async throws -> BLIPResponse {
        try await self.core.sendRequest(request)
    }

    /// Sends a request whose body is produced as it goes (a 1 GiB body never has to sit in memory), and
    /// waits for the reply. The body is pulled only as fast as the connection sends it.
    public func sendRequest<Body: AsyncSequence & Sendable>(
        _ request: BLIPRequest,
        body: Body
    ) async throws -> BLIPResponse where Body.Element == ByteBuffer {
        try await self.core.sendRequest(request, body: body)
    }

    /// Sends a request and returns its reply as soon as the reply's properties arrive, with its body as a
    /// stream; the peer is held back while the body is not read. Throws ``BLIPError`` for an ERR reply.
    public func sendRequestStreamingReply(_ request: BLIPRequest) async throws -> BLIPStreamedResponse {
        try await self.core.sendRequestStreamingReply(request)
    }

    /// Sends a request that must not be answered; returns once its last frame has been handed to the
    /// transport.
    public func sendNoReply(_ request: BLIPRequest) async throws {
        try await self.core.sendNoReply(request)
    }

    /// Requests whose `Profile` no handler serves, when the configuration delivers them
    /// (``UnhandledRequestPolicy/deliver``). Each must be answered.
    public var incomingRequests: BLIPIncomingRequests {
        BLIPIncomingRequests(core: self.core)
    }
}

/// Runs a BLIP connection over `transport` for the duration of `body`, then closes it normally. Handlers
/// registered in `router` answer the peer's requests meanwhile.
public func withBLIPConnection<Result: Sendable>(
    over transport: some BLIPTransport,
    configuration: BLIPConnection.Configuration = BLIPConnection.Configuration(),
    router: BLIPRouter = BLIPRouter(),
    logger: Logger = Logger(label: "blip"),
    _ body: @Sendable (BLIPConnection) async throws -> Result
) async throws -> Result {
    let connection = BLIPConnection(transport: transport, configuration: configuration, router: router, logger: logger)
    return try await withThrowingTaskGroup(of: Void.self) { group in
        group.addTask { await connection.run() }
        do {
            let result = try await body(connection)
            await connection.close()
            try await group.waitForAll()
            return result
        } catch {
            await connection.close()
            try await group.waitForAll()
            throw error
        }
    }
}
