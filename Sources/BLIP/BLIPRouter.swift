/// Maps a request's `Profile` to the handler that answers it.
///
/// A handler returns the reply, or throws: a ``BLIPError`` (or ``BLIPErrorConvertible``) becomes that ERR
/// reply; any other error becomes ERR BLIP/501. A request whose profile has no handler gets ERR BLIP/404,
/// or goes to ``BLIPConnection/incomingRequests`` (``BLIPConnection/UnhandledRequestPolicy/deliver``).
public struct BLIPRouter: Sendable {
    /// Answers a request whose whole body has arrived.
    public typealias Handler = @Sendable (BLIPRequest, BLIPRequestContext) async throws -> BLIPResponse
    /// Answers a request whose whole body has arrived, at once and without suspending (see
    /// ``registerSynchronous(profile:_:)``).
    public typealias SynchronousHandler = @Sendable (BLIPRequest, BLIPRequestContext) throws -> BLIPResponse
    /// Answers a request as its body arrives, piece by piece (ACKs wait for the handler to read).
    public typealias StreamingHandler = @Sendable (BLIPStreamedRequest, BLIPRequestContext) async throws -> BLIPResponse

    enum Route: Sendable {
        case whole(Handler)
        case synchronous(SynchronousHandler)
        case streaming(StreamingHandler)
        /// ``pingProfile`` with no handler registered: an empty reply from the connection itself.
        case ping
    }

    /// The profile of the keepalive request Couchbase Lite for JavaScript sends, which Sync Gateway answers
    /// with an empty reply. A router answers it that way too unless a handler is registered for it; the
    /// connection answers it at once, outside handler slots and serial order, as a keepalive needs.
    public static let pingProfile = "PING"

    /// How requests reach their handlers.
    public enum HandlerOrder: Hashable, Sendable {
        /// Each request's handler starts as soon as the request is complete and runs alongside the others,
        /// up to ``BLIPConnection/Configuration/maximumConcurrentHandlers``: one slow handler holds up no
        /// other. Handlers start in the order requests complete, which may differ from the order they were
        /// sent (a small request sent after a large one arrives first). go-blip's model, and the default.
        case concurrent
        /// One handler at a time, in request-number order (the order the peer sent the requests), however
        /// their frames interleaved: a request's handler starts once every earlier request has been handed
        /// to its handler and that handler has returned. LiteCore's model, for protocols whose requests build
        /// on the ones before (a replicator's `changes` then `rev`). Requests waiting their turn count
        /// against the connection's buffer budget, so a peer faster than the handler is slowed down, not
        /// buffered without bound (see the Handler order article).
        case serial
    }

    var routes: [String: Route] = [:]

    /// How requests reach their handlers: ``HandlerOrder/concurrent`` by default, since handlers of
    /// independent requests should not wait for each other; ``HandlerOrder/serial`` where order matters.
    public var handlerOrder = HandlerOrder.concurrent

    public init(handlerOrder: HandlerOrder = .concurrent) {
        self.handlerOrder = handlerOrder
    }

    /// Registers `handler` for requests whose `Profile` is `profile`, replacing any earlier one.
    public mutating func register(profile: String, _ handler: @escaping Handler) {
        self.routes[profile] = .whole(handler)
    }

    /// Registers a handler that runs where the request arrives, on the transport's thread (the connection's
    /// event loop), as soon as its last frame is read: no task is created and no thread is woken, and its
    /// reply leaves in the same write as the other replies to that read. For small requests this halves
    /// the server's work per request.
    ///
    /// The handler must not block or run long: every connection on that event loop waits while it runs.
    /// Use it for replies computed from the request alone or from memory (an echo, a lookup, a counter);
    /// anything that waits (a database, another request) belongs in ``register(profile:_:)``.
    /// Handler order and ``BLIPConnection/Configuration/maximumConcurrentHandlers`` apply as to any handler:
    /// when the request must wait its turn, the handler later runs in a task like the others.
    public mutating func registerSynchronous(profile: String, _ handler: @escaping SynchronousHandler) {
        self.routes[profile] = .synchronous(handler)
    }

    /// Registers a handler that reads the request body as it arrives.
    public mutating func registerStreaming(profile: String, _ handler: @escaping StreamingHandler) {
        self.routes[profile] = .streaming(handler)
    }

    /// Lets `service` register its handlers.
    public mutating func register(_ service: some BLIPService) {
        service.registerHandlers(with: &self)
    }

    /// Whether a request with this profile is answered: by a registered handler, or (``pingProfile``)
    /// by the connection itself.
    public func hasHandler(forProfile profile: String) -> Bool {
        self.routes[profile] != nil || profile == Self.pingProfile
    }

    var hasStreamingHandlers: Bool {
        self.routes.values.contains { if case .streaming = $0 { true } else { false } }
    }

    func route(forProfile profile: String) -> Route? {
        self.routes[profile] ?? (profile == Self.pingProfile ? .ping : nil)
    }
}

/// A set of handlers registered together.
public protocol BLIPService: Sendable {
    func registerHandlers(with router: inout BLIPRouter)
}
