public import BLIP
internal import BLIPWire
public import Logging
internal import NIOConcurrencyHelpers
public import NIOCore
internal import NIOHTTP1
public import NIOPosix
package import NIOSSL
internal import NIOWebSocket
public import ServiceLifecycle

/// Accepts BLIP connections over WebSocket.
///
/// ```swift
/// let server = try await BLIPWebSocketServer.bind(configuration: .init(), router: router)
/// print("listening on port \(server.port)")
/// await server.run()            // until close() or closeGracefully()
/// ```
///
/// It is a swift-service-lifecycle `Service`: in a `ServiceGroup`, a graceful shutdown (a signal the group
/// was configured with) runs ``closeGracefully(drainTimeout:)``, and cancellation ``close()``.
public final class BLIPWebSocketServer: Sendable {
    public struct Configuration: Sendable {
        public var host = "127.0.0.1"
        /// 0 picks a free port.
        public var port = 4985
        /// The request path served, or a pattern such as `/{db}/_blipsync` where a `{name}` segment
        /// matches any one non-empty segment and captures it, percent-decoded, into
        /// ``BLIPUpgradeRequest/pathParameters``. Other paths get 404. nil serves any path.
        public var path: String?
        /// Subprotocols spoken. The server picks the first of the client's offers that it speaks (the
        /// client's preference wins, as in go-blip).
        public var subprotocols = BLIPSubprotocol.serverDefaults
        /// Clients that offer no subprotocol speak the seed dialect (otherwise they are refused).
        public var acceptsSeedDialect = false
        public var tls: TLS?
        public var heartbeatInterval: Duration? = .seconds(300)
        public var heartbeatTimeout = Duration.seconds(30)
        /// After sending a close frame, how long to wait for the peer's before closing the TCP connection.
        public var closeTimeout = Duration.seconds(2)
        /// How long a graceful shutdown lets each connection finish what is in flight before it closes it
        /// with 1001 anyway (``closeGracefully(drainTimeout:)``).
        public var drainTimeout = Duration.seconds(10)
        /// The largest WebSocket message accepted (fragments reassembled).
        public var maximumMessageSize = 1 << 20
        /// How long a client has from its TCP connect to a completed WebSocket upgrade (a TLS handshake
        /// included); then its connection is closed. Without it a client that sends nothing, or a byte at a
        /// time, holds its socket forever.
        public var handshakeTimeout = Duration.seconds(10)
        /// The largest HTTP request head accepted, in bytes of request target and header names and values
        /// (each field alone, and all together); a larger one gets HTTP 400 and the connection closes.
        public var maximumRequestHeadSize = 16 * 1024
        /// The most connections open at once, counted from accept to close, those still in their handshake
        /// included; a connection beyond it is closed as soon as it is accepted. nil: no limit but the
        /// process's file descriptors (while none is left, accepting pauses).
        public var maximumConnections: Int?
        /// Write every connection's frames to a new folder `connection-NNN` under this one.
        package var captureDirectory: String?
        /// Connections that get a raw WebSocket endpoint instead of BLIP (echo, and the `sink:N` /
        /// `source:N` commands of the benchmark baselines): those offering this subprotocol, or all.
        package var rawEndpoint = RawEndpointPolicy.none
        /// What the raw endpoint does with text messages.
        package var rawEndpointMode = RawEndpointMode.benchmark
        public var connection = BLIPConnection.Configuration()
        /// What plain HTTP requests on the same port get (the web bridge's static files); nil answers them
        /// 426, as a BLIP endpoint does. Set through `staticFiles` of module BLIPWebBridge.
        package var plainHTTP: (any PlainHTTPService)?
        /// Origins, besides the server's own, whose web pages may open connections: exact origins
        /// (`https://app.example.com`), host patterns (`*.example.com`, `app.example.com:8443`), or `*` for
        /// any page of any site.
        ///
        /// Browsers send `Origin` with every WebSocket upgrade, and send the user's cookies and cached Basic
        /// credentials with it, whichever site's page asked: without this check any site could open an
        /// authenticated connection (cross-site WebSocket hijacking). An upgrade without `Origin` is not
        /// from a browser and is allowed; one from the server's own pages (an `http` or `https` origin whose
        /// host and port are the request's `Host`) is allowed; any other gets 403 unless it matches one of
        /// these. Patterns are compared without regard to case; a pattern with `://` is matched against the
        /// whole origin, one with a port against the origin's host and port, any other against its host;
        /// `*` matches any run of characters (`*.example.com` does not match `example.com`).
        public var allowedOrigins: [String] = []
        /// What the peers of all connections together may make the server hold (each connection also has
        /// its own `connection.incomingBufferBudget`). Past it, the connections holding the most are slowed
        /// first (each connection's budget becomes at most its even share: ACKs withheld, reading paused,
        /// new requests refused with ERR BLIP/503), and new upgrades get 503 with `Retry-After`, so that the
        /// server holds at most about this much plus a frame per connection.
        public var serverBufferBudget = ServerBufferBudget.fractionOfPhysicalMemory(0.25)
        /// Closes a connection that has sent and received no BLIP frame for this long (WebSocket pings do not
        /// count), gracefully with 1001, within one to two idle timeouts: what load balancers and proxies that
        /// drop idle connections silently need instead. nil keeps idle connections.
        public var idleTimeout: Duration?
        /// Closes every connection this long after its upgrade, gracefully with 1001 (what is in flight
        /// finishes, up to the shutdown drain timeout), so that clients reconnect and spread over the servers
        /// behind a load balancer, new ones included. nil keeps connections as long as they last.
        public var maximumConnectionAge: Duration?

        public init() {}
    }

    package enum RawEndpointPolicy: Hashable, Sendable {
        case none
        /// Clients offering this subprotocol get the raw endpoint (`BLIPRawWebSocket.benchmarkSubprotocol`).
        case forSubprotocol(String)
        /// Every connection is raw (for Autobahn, whose client offers no subprotocol).
        case always
    }

    /// What a raw endpoint does.
    package enum RawEndpointMode: Hashable, Sendable {
        /// Echoes, except for the `sink:N` and `source:N` text commands of the benchmark baselines.
        case benchmark
        /// Echoes every message, text as text and binary as binary, whatever it says (for Autobahn).
        case echo
    }

    /// The server's certificate chain and private key, as PEM files, and whether it asks clients for
    /// certificates of their own.
    public struct TLS: Sendable, Hashable {
        public var certificateChainPath: String
        public var privateKeyPath: String
        /// Client certificates, verified against trust roots from a PEM file; what the client presented is
        /// in ``BLIPUpgradeRequest/peerCertificateChain``.
        public var clientCertificates = ClientCertificates.none

        public enum ClientCertificates: Sendable, Hashable {
            /// None asked for.
            case none
            /// Asked for; a client without one is still served (its upgrade handler can decide), one with a
            /// certificate these roots do not trust fails the TLS handshake.
            case optional(trustRootsPath: String)
            /// A client without a certificate these roots trust fails the TLS handshake.
            case required(trustRootsPath: String)
        }

        public init(
            certificateChainPath: String,
            privateKeyPath: String,
            clientCertificates: ClientCertificates = .none
        ) {
            self.certificateChainPath = certificateChainPath
            self.privateKeyPath = privateKeyPath
            self.clientCertificates = clientCertificates
        }
    }

    /// A connection the server accepted, for logging.
    public struct AcceptedConnection: Sendable {
        public var connection: BLIPConnection
        public var remoteAddress: String
        public var subprotocol: String?
        /// The request target (path and query).
        public var path: String
        /// The request the connection was upgraded from (also ``BLIP/BLIPConnection/upgradeRequest``).
        public var upgradeRequest: BLIPUpgradeRequest
    }

    public let configuration: Configuration
    let channel: any Channel
    let logger: Logger
    private let accepted: AsyncStream<AcceptedConnection>
    private let acceptedContinuation: AsyncStream<AcceptedConnection>.Continuation
    private let connections = NIOLockedValueBox(Connections())
    let rawChannels: RawChannels

    /// The port the server listens on.
    /// The server side of TLS, from PEM files; shared with the proxy that terminates TLS for its clients.
    package static func makeTLSContext(_ tls: TLS) throws -> NIOSSLContext {
        let chain = try NIOSSLCertificate.fromPEMFile(tls.certificateChainPath).map {
            NIOSSLCertificateSource.certificate($0)
        }
        let key = try NIOSSLPrivateKey(file: tls.privateKeyPath, format: .pem)
        var server = TLSConfiguration.makeServerConfiguration(certificateChain: chain, privateKey: .privateKey(key))
        switch tls.clientCertificates {
        case .none:
            break
        case .optional(let trustRootsPath):
            server.certificateVerification = .optionalVerification
            server.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(trustRootsPath))
        case .required(let trustRootsPath):
            // A server has no host name to check in a client's certificate.
            server.certificateVerification = .noHostnameVerification
            server.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(trustRootsPath))
        }
        return try NIOSSLContext(configuration: server)
    }

    public var port: Int { self.channel.localAddress?.port ?? self.configuration.port }

    private init(
        configuration: Configuration,
        channel: any Channel,
        logger: Logger,
        accepted: (AsyncStream<AcceptedConnection>, AsyncStream<AcceptedConnection>.Continuation),
        rawChannels: RawChannels
    ) {
        self.rawChannels = rawChannels
        self.configuration = configuration
        self.channel = channel
        self.logger = logger
        (self.accepted, self.acceptedContinuation) = accepted
    }

    /// Starts listening. Connections are served once ``run(onConnection:)`` runs. `upgradeHandler`, when
    /// given, decides every upgrade that passes the server's own checks (path, subprotocol): it can refuse
    /// it, or accept it with an identity for the connection and extra headers for the 101.
    public static func bind(
        configuration: Configuration = Configuration(),
        router: BLIPRouter = BLIPRouter(),
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "blip.websocket.server"),
        upgradeHandler: UpgradeHandler? = nil
    ) async throws -> BLIPWebSocketServer {
        let tlsContext = try configuration.tls.map(Self.makeTLSContext)
        let accepted = AsyncStream.makeStream(of: AcceptedConnection.self)
        let sharedBudget = configuration.serverBufferBudget.bytes.map { SharedBufferBudget(limit: $0) }
        let configuration = {
            var configuration = configuration
            configuration.connection.sharedBudget = sharedBudget
            return configuration
        }()
        let policy = UpgradePolicy(configuration: configuration, sharedBudget: sharedBudget)
        let staticFiles = try configuration.plainHTTP.map { try $0.makeResponder() }
        let captureCounter = CaptureCounter()
        let rawChannels = RawChannels()
        let settings = UpgradedServerChannel.Settings(
            heartbeatInterval: configuration.heartbeatInterval.map(TimeAmount.init),
            heartbeatTimeout: TimeAmount(configuration.heartbeatTimeout),
            closeTimeout: TimeAmount(configuration.closeTimeout),
            maximumMessageSize: configuration.maximumMessageSize,
            frameSize: configuration.connection.frameSize,
            logger: logger
        )
        let channel = try await ServerBootstrap(group: eventLoopGroup)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .serverChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try Self.initializeListener(
                        channel,
                        maximumConnections: configuration.maximumConnections,
                        logger: logger
                    )
                }
            }
            .childChannelOption(.tcpOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try Self.initialize(
                        channel,
                        policy: policy,
                        staticFiles: staticFiles,
                        upgradeHandler: upgradeHandler,
                        tlsContext: tlsContext,
                        settings: settings,
                        router: router,
                        configuration: configuration,
                        captureCounter: captureCounter,
                        rawChannels: rawChannels,
                        accepted: accepted.continuation
                    )
                }
            }
            .bind(host: configuration.host, port: configuration.port)
            .get()
        let server = BLIPWebSocketServer(
            configuration: configuration,
            channel: channel,
            logger: logger,
            accepted: accepted,
            rawChannels: rawChannels
        )
        logger.info("listening", metadata: ["blip.address": "\(channel.localAddress.map { "\($0)" } ?? "?")"])
        return server
    }

    /// Serves connections until ``close()`` or ``closeGracefully(drainTimeout:)``: each connection's
    /// handlers run here. Under a swift-service-lifecycle graceful shutdown it shuts down gracefully; when
    /// its task is cancelled, at once.
    ///
    /// - Parameter onConnection: The application's scope for each accepted connection, run in a task of the
    ///   connection's own (beside its handlers) from the upgrade on: a place for what the server does on its
    ///   own initiative, such as pushing a feed. It is cancelled when the connection closes. Throwing while
    ///   the connection is open closes it with 1011 (internal error) and logs the error; returning leaves
    ///   the connection open.
    public func run(onConnection: (@Sendable (AcceptedConnection) async throws -> Void)? = nil) async {
        await self.run(onConnection: onConnection, observer: nil)
    }

    /// Told when a connection has been accepted and when it has closed, in the connection's own task: what
    /// the package's tool logs for each connection, without a scope task per connection (an idle
    /// connection's memory is mostly its tasks).
    package struct ConnectionObserver: Sendable {
        package var opened: @Sendable (AcceptedConnection) -> Void
        package var closed: @Sendable (AcceptedConnection) -> Void

        package init(
            opened: @escaping @Sendable (AcceptedConnection) -> Void,
            closed: @escaping @Sendable (AcceptedConnection) -> Void
        ) {
            self.opened = opened
            self.closed = closed
        }
    }

    /// ``run(onConnection:)`` with no scope, telling `observer` of each connection's start and end.
    package func run(observing observer: ConnectionObserver) async {
        await self.run(onConnection: nil, observer: observer)
    }

    private func run(
        onConnection: (@Sendable (AcceptedConnection) async throws -> Void)?,
        observer: ConnectionObserver?
    ) async {
        // The stops these handlers start, awaited before returning: a service is done when it has stopped.
        let stops = NIOLockedValueBox<[Task<Void, Never>]>([])
        await withGracefulShutdownHandler {
            await withTaskCancellationHandler {
                await self.serve(onConnection, observer: observer)
            } onCancel: {
                let stop = Task { await self.close() }
                stops.withLockedValue { $0.append(stop) }
            }
        } onGracefulShutdown: {
            let stop = Task { await self.closeGracefully() }
            stops.withLockedValue { $0.append(stop) }
        }
        for stop in stops.withLockedValue({ $0 }) { await stop.value }
    }

    private func serve(
        _ onConnection: (@Sendable (AcceptedConnection) async throws -> Void)?,
        observer: ConnectionObserver?
    ) async {
        await withDiscardingTaskGroup { group in
            for await accepted in self.accepted {
                let connection = accepted.connection
                // One that completed its handshake as the server began to stop gets the same close.
                let stopping = self.connections.withLockedValue { connections in
                    connections.open.insert(connection)
                    return connections.stopping
                }
                let scope = onConnection.map { onConnection in
                    { @Sendable (_: BLIPConnection) async throws in try await onConnection(accepted) }
                }
                let age = self.configuration.maximumConnectionAge
                let idle = self.configuration.idleTimeout
                group.addTask {
                    observer?.opened(accepted)
                    if age == nil && idle == nil {
                        // No timers: no group for them (memory per idle connection).
                        await connection.run(scope: scope)
                    } else {
                        await withTaskGroup(of: Void.self) { timers in
                            if let age { timers.addTask { await self.close(connection, after: age) } }
                            if let idle {
                                timers.addTask { await self.closeWhenIdle(connection, idleTimeout: idle) }
                            }
                            await connection.run(scope: scope)
                            timers.cancelAll()
                        }
                    }
                    _ = self.connections.withLockedValue { $0.open.remove(connection) }
                    observer?.closed(accepted)
                }
                if let stopping { group.addTask { await stopping.close(connection) } }
            }
        }
    }

    /// Stops accepting, closes every connection normally (1000) at once, and lets ``run(onConnection:)``
    /// return when they have closed.
    public func close() async {
        await self.stop(.immediately)
    }

    /// Stops accepting and lets every connection finish what is in flight (see
    /// `BLIPConnection.closeGracefully(drainTimeout:code:reason:)`: requests already being handled
    /// are answered, replies to the server's own requests arrive, new requests get ERR BLIP/503), for at
    /// most `drainTimeout` (nil: ``Configuration/drainTimeout``); then closes each with 1001 (going
    /// away), failing what is left with that status. Returns when every connection has closed;
    /// ``run(onConnection:)`` returns then too.
    public func closeGracefully(drainTimeout: Duration? = nil) async {
        let timeout = drainTimeout ?? self.configuration.drainTimeout
        await self.stop(.gracefully(drainTimeout: timeout))
    }

    private func stop(_ mode: StopMode) async {
        let open = self.connections.withLockedValue { connections in
            // A stop at once overrides a graceful one under way (a group cancelled while it drains).
            if case .immediately = mode {
                connections.stopping = mode
            } else if connections.stopping == nil {
                connections.stopping = mode
            }
            return Array(connections.open)
        }
        try? await self.channel.close()
        self.acceptedContinuation.finish()
        for channel in self.rawChannels.raw { channel.close(promise: nil) }
        await withDiscardingTaskGroup { group in
            for connection in open {
                group.addTask { await mode.close(connection) }
            }
        }
        // Wait for every connection's socket to close (and its capture to be written).
        for channel in self.rawChannels.all {
            try? await channel.closeFuture.get()
        }
    }

    /// The drain timeout of closes the server decides itself (age, idleness, graceful shutdown).
    private var drainTimeout: Duration { self.configuration.drainTimeout }

    private func close(_ connection: BLIPConnection, after age: Duration) async {
        guard (try? await Task.sleep(for: age)) != nil else { return }
        await connection.closeGracefully(drainTimeout: self.drainTimeout, reason: "maximum connection age")
    }

    /// Closes `connection` once a whole idle timeout has gone by with no BLIP frame either way.
    private func closeWhenIdle(_ connection: BLIPConnection, idleTimeout: Duration) async {
        var frames = -1
        while !connection.isClosed {
            let statistics = connection.statistics
            let now = statistics.framesReceived + statistics.framesSent
            if now == frames {
                await connection.closeGracefully(drainTimeout: self.drainTimeout, reason: "idle")
                return
            }
            frames = now
            guard (try? await Task.sleep(for: idleTimeout)) != nil else { return }
        }
    }

    /// Connections open now.
    public var openConnectionCount: Int { self.connections.withLockedValue { $0.open.count } }

    /// The connections being served, and how the server is stopping once it is.
    private struct Connections {
        var open: Set<BLIPConnection> = []
        var stopping: StopMode?
    }

    private enum StopMode: Sendable {
        case immediately
        case gracefully(drainTimeout: Duration)

        func close(_ connection: BLIPConnection) async {
            switch self {
            case .immediately:
                await connection.close()
            case .gracefully(let drainTimeout):
                await connection.closeGracefully(drainTimeout: drainTimeout, reason: "server shutting down")
            }
        }
    }

    /// The listening channel's handlers: a pause after accept fails for want of descriptors or memory (with
    /// its rate-limited log), and the connection limit.
    private static func initializeListener(
        _ channel: any Channel,
        maximumConnections: Int?,
        logger: Logger
    ) throws {
        let sync = channel.pipeline.syncOperations
        try sync.addHandler(AcceptPauseHandler(logger: logger))
        if let maximumConnections {
            try sync.addHandler(ConnectionLimitHandler(limit: maximumConnections, logger: logger))
        }
    }

    private static func initialize(
        _ channel: any Channel,
        policy: UpgradePolicy,
        staticFiles: (any PlainHTTPResponder)?,
        upgradeHandler: UpgradeHandler?,
        tlsContext: NIOSSLContext?,
        settings: UpgradedServerChannel.Settings,
        router: BLIPRouter,
        configuration: Configuration,
        captureCounter: CaptureCounter,
        rawChannels: RawChannels,
        accepted: AsyncStream<AcceptedConnection>.Continuation
    ) throws {
        let sync = channel.pipeline.syncOperations
        try sync.addHandler(
            HandshakeTimeoutHandler(timeout: TimeAmount(configuration.handshakeTimeout), logger: settings.logger),
            name: HandshakeTimeoutHandler.name
        )
        if let tlsContext { try sync.addHandler(NIOSSLServerHandler(context: tlsContext)) }
        let negotiation = NIOLoopBound(
            UpgradeNegotiation(policy: policy, handler: upgradeHandler, logger: settings.logger),
            eventLoop: channel.eventLoop
        )
        let upgrader = BLIPServerUpgrader<Void>(
            maximumFrameSize: configuration.maximumMessageSize,
            shouldUpgrade: { channel, head in negotiation.value.shouldUpgrade(channel, head) },
            upgradePipelineHandler: { channel, head in
                channel.eventLoop.makeCompletedFuture {
                    guard case .upgrade(let verdict, let request, let identity) = negotiation.value.outcome else {
                        throw BLIPConnectionError(.handshakeFailed, "upgrade no longer acceptable")
                    }
                    if case .raw = verdict {
                        let handler = BLIPWebSocketHandler(settings: settings.handlerSettings)
                        try channel.pipeline.syncOperations.addHandler(handler)
                        handler.start(RawEndpoint(mode: configuration.rawEndpointMode))
                        rawChannels.add(channel, isRaw: true)
                        channel.pipeline.syncOperations.removeHandler(name: HandshakeTimeoutHandler.name, promise: nil)
                        return
                    }
                    guard case .accept(let subprotocol, let dialect) = verdict else {
                        throw BLIPConnectionError(.handshakeFailed, "upgrade no longer acceptable")
                    }
                    let capture = try configuration.captureDirectory.map {
                        try BLIPFrameCapture.forNewConnection(under: $0, dialect: dialect, counter: captureCounter)
                    }
                    let connection = try UpgradedServerChannel.makeConnection(
                        on: channel,
                        dialect: dialect,
                        subprotocol: subprotocol,
                        upgradeRequest: request,
                        identity: identity,
                        router: router,
                        configuration: configuration.connection,
                        settings: settings,
                        capture: capture
                    )
                    rawChannels.add(channel, isRaw: false)
                    channel.pipeline.syncOperations.removeHandler(name: HandshakeTimeoutHandler.name, promise: nil)
                    let offered = accepted.yield(
                        AcceptedConnection(
                            connection: connection,
                            remoteAddress: channel.remoteAddress.map { "\($0)" } ?? "?",
                            subprotocol: subprotocol,
                            path: head.uri,
                            upgradeRequest: request
                        )
                    )
                    // The server stopped serving while this one was in its handshake: nobody will run it.
                    if case .terminated = offered { channel.close(promise: nil) }
                }
            }
        )
        // Set explicitly: NIO's defaults have changed between releases (80 KB, 2 MB, 80 KB again).
        var headLimits = NIOHTTPDecoderLimitConfiguration()
        headLimits.maxHeaderFieldSize = configuration.maximumRequestHeadSize
        headLimits.maxHeaderListSize = configuration.maximumRequestHeadSize
        try sync.configureHTTPServerPipeline(
            withServerUpgrade: (
                upgraders: [upgrader],
                completionHandler: { context in
                    context.pipeline.syncOperations.removeHandler(name: "blip-refusal", promise: nil)
                }
            ),
            withErrorHandling: true,
            withEncoderConfiguration: HTTPResponseEncoder.Configuration(),
            withDecoderLimitConfiguration: headLimits
        )
        try sync.addHandler(
            RefusalHandler(policy: policy, negotiation: negotiation.value, staticFiles: staticFiles),
            name: "blip-refusal"
        )
    }
}

/// The upgraded channels of a server (raw ones are closed directly at shutdown; BLIP ones through their
/// connection), so that shutdown can wait for all of them.
final class RawChannels: Sendable {
    private let channels = NIOLockedValueBox<[ObjectIdentifier: (channel: any Channel, isRaw: Bool)]>([:])

    func add(_ channel: any Channel, isRaw: Bool) {
        let key = ObjectIdentifier(channel)
        self.channels.withLockedValue { $0[key] = (channel, isRaw) }
        channel.closeFuture.whenComplete { _ in _ = self.channels.withLockedValue { $0.removeValue(forKey: key) } }
    }

    var all: [any Channel] { self.channels.withLockedValue { $0.values.map(\.channel) } }
    var raw: [any Channel] { self.channels.withLockedValue { $0.values.filter(\.isRaw).map(\.channel) } }
}

/// Whether to upgrade a request, and to what.
struct UpgradePolicy: Sendable {
    enum Decision {
        case accept(subprotocol: String?, dialect: BLIPDialect)
        /// A raw endpoint, not BLIP.
        case raw(subprotocol: String?)
        case refuse(HTTPResponseStatus, String)
    }

    let path: PathPattern?
    let subprotocols: [String]
    let acceptsSeedDialect: Bool
    let rawEndpoint: BLIPWebSocketServer.RawEndpointPolicy
    /// Which browsers' pages may connect; with web pages served, the stricter rule of a local bridge.
    let origins: OriginRule
    let browserOrigins: BrowserOriginRule?
    /// While it is exceeded, new upgrades get 503.
    let sharedBudget: SharedBufferBudget?

    init(configuration: BLIPWebSocketServer.Configuration, sharedBudget: SharedBufferBudget? = nil) {
        self.sharedBudget = sharedBudget
        self.origins = OriginRule(allowedOrigins: configuration.allowedOrigins)
        self.browserOrigins = configuration.plainHTTP.map {
            BrowserOriginRule($0, allowedOrigins: configuration.allowedOrigins)
        }
        self.path = configuration.path.map(PathPattern.init)
        self.subprotocols = configuration.subprotocols
        self.acceptsSeedDialect = configuration.acceptsSeedDialect
        self.rawEndpoint = configuration.rawEndpoint
    }

    func decide(_ head: HTTPRequestHead) -> Decision {
        guard head.method == .GET else { return .refuse(.methodNotAllowed, "GET required") }
        guard self.pathParameters(head.uri) != nil else {
            return .refuse(.notFound, "no BLIP endpoint at \(head.uri.prefix { $0 != "?" })")
        }
        let origin = head.headers.first(name: "Origin")
        let host = head.headers.first(name: "Host")
        let allowed =
            self.browserOrigins?.allowsUpgrade(origin: origin, host: host)
            ?? self.origins.allows(origin: origin, host: host)
        guard allowed else { return .refuse(.forbidden, "pages from this origin may not connect") }
        if let sharedBudget, sharedBudget.isExceeded {
            return .refuse(.serviceUnavailable, "the server is holding all the data it may; try again shortly")
        }
        let offered = BLIPSubprotocol.parseOffers(head.headers["Sec-WebSocket-Protocol"])
        switch self.rawEndpoint {
        case .always: return .raw(subprotocol: offered.first)
        case .forSubprotocol(let raw) where offered.contains(raw): return .raw(subprotocol: raw)
        default: break
        }
        let negotiated = HandshakeRules.negotiate(
            offered: offered,
            supported: self.subprotocols,
            acceptsSeedDialect: self.acceptsSeedDialect
        )
        if let (subprotocol, dialect) = negotiated {
            return .accept(subprotocol: subprotocol, dialect: dialect)
        }
        return .refuse(.internalServerError, HandshakeRules.subprotocolRefusalText(supported: self.subprotocols))
    }

    /// What the path pattern captures from a request target, or nil when it does not match.
    func pathParameters(_ uri: String) -> [String: String]? {
        guard let path = self.path else { return [:] }
        return path.match(String(uri.prefix { $0 != "?" }))
    }
}

/// Answers every request that was not upgraded: 400 for an upgrade request without its key, the policy's
/// refusal, the upgrade handler's, or, for plain HTTP, a static file when the server serves them and 426
/// otherwise.
final class RefusalHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPServerRequestPart
    typealias OutboundOut = HTTPServerResponsePart

    private let policy: UpgradePolicy
    private let negotiation: UpgradeNegotiation
    private let staticFiles: (any PlainHTTPResponder)?
    private var head: HTTPRequestHead?

    init(policy: UpgradePolicy, negotiation: UpgradeNegotiation, staticFiles: (any PlainHTTPResponder)? = nil) {
        self.policy = policy
        self.negotiation = negotiation
        self.staticFiles = staticFiles
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch Self.unwrapInboundIn(data) {
        case .head(let head):
            self.head = head
        case .body:
            break
        case .end:
            guard let head = self.head else { return }
            self.head = nil
            var status = HTTPResponseStatus.upgradeRequired
            var text = HandshakeRules.notAnUpgradeText
            var headers = HTTPHeaders()
            let isUpgrade = HandshakeRules.isWebSocketUpgrade(head.headers["Upgrade"])
            if !isUpgrade, let staticFiles = self.staticFiles, let origins = self.policy.browserOrigins {
                return staticFiles.respond(to: head, context: context, origins: origins)
            }
            if isUpgrade && head.headers["Sec-WebSocket-Key"].count != 1 {
                status = .badRequest
                text = HandshakeRules.missingKeyText
            } else if isUpgrade, case .refuse(let refusal)? = self.negotiation.outcome {
                status = refusal.status
                text = refusal.body
                headers = refusal.headers
            } else if isUpgrade, case .refuse(let refusal, let message) = self.policy.decide(head) {
                status = refusal
                text = message + "\n"
                if refusal == .serviceUnavailable { headers.add(name: "Retry-After", value: "1") }
            } else {
                headers.add(name: "Sec-WebSocket-Version", value: "13")
            }
            let body = context.channel.allocator.buffer(string: text)
            if !headers.contains(name: "Content-Type") {
                headers.add(name: "Content-Type", value: "text/plain; charset=utf-8")
            }
            headers.add(name: "Content-Length", value: String(body.readableBytes))
            headers.add(name: "Connection", value: "close")
            context.write(
                Self.wrapOutboundOut(.head(HTTPResponseHead(version: head.version, status: status, headers: headers))),
                promise: nil
            )
            context.write(Self.wrapOutboundOut(.body(.byteBuffer(body))), promise: nil)
            let loopBound = NIOLoopBound(context, eventLoop: context.eventLoop)
            context.writeAndFlush(Self.wrapOutboundOut(.end(nil))).whenComplete { _ in
                loopBound.value.close(promise: nil)
            }
        }
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if error is NIOWebSocketUpgradeError { return }  // a refusal: the request itself follows
        context.close(promise: nil)
    }
}

extension BLIPWebSocketServer: Service {
    /// Serves connections (``run(onConnection:)`` without a callback); what a `ServiceGroup` runs.
    public func run() async {
        await self.run(onConnection: nil)
    }
}
