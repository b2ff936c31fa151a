public import BLIP
internal import BLIPWire
internal import Crypto
public import Logging
public import NIOCore
internal import NIOHTTP1
public import NIOPosix
public import NIOSSL
internal import NIOWebSocket

#if canImport(FoundationEssentials)
    public import FoundationEssentials
#else
    public import Foundation
#endif

/// Opens BLIP connections over WebSocket (`ws://` and `wss://`).
public enum BLIPWebSocketClient {
    public struct Configuration: Sendable {
        /// Subprotocols offered, most preferred first, in one header (as Couchbase Lite does).
        public var subprotocols = BLIPSubprotocol.couchbaseMobileDefaults
        /// Speak the 2013 seed dialect: offer no subprotocol. The server must be configured for it too.
        public var usesSeedDialect = false
        /// A one-time session token, offered as the extra subprotocol entry `SyncGatewaySession_<token>`
        /// after the BLIP ones, as browsers authenticate to Sync Gateway 3.3+. The server never chooses it.
        public var sessionToken: String?
        /// Extra request headers. An `Authorization` here wins over ``credentials`` and credentials in
        /// the URL.
        public var headers: HTTPFields = [:]
        /// Credentials sent with the handshake to the URL's origin; they win over a user and password in
        /// the URL.
        public var credentials: BLIPCredentials?
        /// How many redirects (301, 302, 303, 307, 308) of the handshake are followed; 0 turns following
        /// off, and a redirect then fails with a ``BLIPHandshakeError`` with code `redirect`.
        public var maximumRedirects = 5
        /// How long the TCP connection may take. 30 s: a SYN that is lost is sent again after 1, 3, 7 and
        /// 15 s, and at 10 s (the earlier default) even loopback connects to a busy server failed.
        public var connectTimeout = Duration.seconds(30)
        /// How long the TLS and WebSocket handshakes may take once connected (each redirect anew): a
        /// server that accepts and never answers fails the connect with
        /// `BLIPConnectionError.Code.timedOut` instead of holding it forever.
        public var handshakeTimeout = Duration.seconds(30)
        public var tls = TLS()
        /// Reach the server through this proxy (nil: connect directly). The connect timeout covers the TCP
        /// connection to the proxy, the handshake timeout the tunnel and then the TLS and WebSocket handshakes.
        public var proxy: BLIPProxy?
        /// Opt-in: without a ``proxy``, take one from these environment variables as curl does (usually
        /// `ProcessInfo.processInfo.environment`), for each URL, redirects included. See
        /// ``BLIPProxy/fromEnvironment(host:port:isSecure:environment:)``.
        public var proxyEnvironment: [String: String]?
        /// WebSocket ping every this often; nil or zero turns the heartbeat off.
        public var heartbeatInterval: Duration? = .seconds(300)
        /// The connection fails if a ping gets no pong within this.
        public var heartbeatTimeout = Duration.seconds(30)
        /// After sending a close frame, how long to wait for the peer's before closing the TCP connection.
        public var closeTimeout = Duration.seconds(2)
        /// The largest WebSocket message accepted (fragments reassembled).
        public var maximumMessageSize = 1 << 20
        /// Write every frame to a new folder `connection-NNN` under this one (see `BLIPFrameCapture`).
        package var captureDirectory: String?
        public var connection = BLIPConnection.Configuration()

        public init() {}
    }

    /// Numbers capture folders across the process's client connections.
    static let captureCounter = CaptureCounter()

    /// How `wss://` connections check the server.
    public struct TLS: Sendable {
        public enum TrustRoots: Sendable, Hashable {
            case system
            /// Certificates in a PEM file (a private CA, or the server's own self-signed certificate).
            case pemFile(String)
        }

        /// A certificate chain and its private key, presented when the server asks for one (mutual TLS).
        public struct ClientCertificate: Sendable, Hashable {
            enum Source: Sendable, Hashable {
                case files(chain: String, key: String)
                case pem(chain: String, key: String)
            }

            let source: Source

            /// PEM files: the chain (leaf first) and the key.
            public static func pemFiles(certificateChainPath: String, privateKeyPath: String) -> ClientCertificate {
                ClientCertificate(source: .files(chain: certificateChainPath, key: privateKeyPath))
            }

            /// PEM text in memory (from a keychain or a secret store): the chain (leaf first) and the key.
            public static func pem(certificateChain: String, privateKey: String) -> ClientCertificate {
                ClientCertificate(source: .pem(chain: certificateChain, key: privateKey))
            }
        }

        /// Decides on the server's certificates in place of every check here (trust roots, name, pins). It
        /// gets the chain as the server presented it, leaf first, on the connection's event loop, and must
        /// complete the promise (it may do so later, from anywhere).
        public typealias CustomVerification =
            @Sendable ([NIOSSLCertificate], EventLoopPromise<NIOSSLVerificationResult>) -> Void

        /// NIOSSL's configuration to start from, for what the options here do not cover: minimum and maximum
        /// TLS versions, cipher suites, ALPN, key logging. The options below that are set are applied on top
        /// of it; nil starts from `TLSConfiguration.makeClientConfiguration()`.
        public var configuration: TLSConfiguration?
        public var trustRoots = TrustRoots.system
        /// Accept only a server whose leaf certificate has this SHA-256 (of its DER form), whatever signs it.
        public var pinnedCertificateSHA256: [UInt8]?
        /// Accept only a server whose presented chain holds a certificate with one of these SHA-256s (of the
        /// DER form), which then is the only trust anchor: the chain from the leaf up to it must verify, with
        /// the server's name and the dates (a pinned leaf is accepted as itself, as with
        /// ``pinnedCertificateSHA256``). Pin a CA or intermediate to survive the renewal of the leaf, and a
        /// second (backup) one. With ``pinnedCertificateSHA256`` as well, either one accepts.
        public var pinnedChainSHA256: [[UInt8]] = []
        /// What this client presents when the server asks for a certificate; nil presents none.
        public var clientCertificate: ClientCertificate?
        /// The name sent in SNI and checked against the server's certificate, instead of the URL's host: for
        /// a server reached by address, or under a name its certificate does not carry.
        public var serverName: String?
        /// See ``CustomVerification``; nil keeps NIOSSL's verification with the options here.
        public var customVerification: CustomVerification?

        public init() {}
    }

    /// Connects to `url`, runs `body` with the connection, then closes it normally.
    ///
    /// `body` runs on the caller's actor. If the connection ends first (the server closes it, the network
    /// fails), `body` is cancelled and this throws the `BLIPConnectionError` carrying the
    /// `BLIPCloseStatus`, as `withBLIPConnection(over:configuration:router:logger:identity:isolation:_:)`
    /// does.
    public static func connect<Result: Sendable>(
        to url: String,
        configuration: Configuration = Configuration(),
        router: BLIPRouter = BLIPRouter(),
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "blip.websocket.client"),
        isolation: isolated (any Actor)? = #isolation,
        _ body: (BLIPConnection) async throws -> Result
    ) async throws -> Result {
        let transport = try await self.openTransport(
            to: url,
            configuration: configuration,
            eventLoopGroup: eventLoopGroup,
            logger: logger
        )
        do {
            let result = try await withBLIPConnection(
                over: transport,
                configuration: configuration.connection,
                router: router,
                logger: logger,
                isolation: isolation,
                body
            )
            try? await transport.closeFuture.get()  // the close handshake is over, captures are written
            return result
        } catch {
            try? await transport.closeFuture.get()
            throw error
        }
    }

    /// Connects to `url` (a `ws://` or `wss://` URL), runs `body` with the connection, then closes it
    /// normally, as the overload taking the URL as text does.
    public static func connect<Result: Sendable>(
        to url: URL,
        configuration: Configuration = Configuration(),
        router: BLIPRouter = BLIPRouter(),
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "blip.websocket.client"),
        isolation: isolated (any Actor)? = #isolation,
        _ body: (BLIPConnection) async throws -> Result
    ) async throws -> Result {
        try await self.connect(
            to: url.absoluteString,
            configuration: configuration,
            router: router,
            eventLoopGroup: eventLoopGroup,
            logger: logger,
            isolation: isolation,
            body
        )
    }

    /// Performs the WebSocket handshake and returns the transport, for a ``BLIP/BLIPConnection`` that the caller
    /// runs itself.
    public static func openTransport(
        to urlString: String,
        configuration: Configuration = Configuration(),
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "blip.websocket.client")
    ) async throws -> BLIPWebSocketTransport {
        try await self.handshake(
            to: urlString,
            configuration: configuration,
            rawSink: nil,
            eventLoopGroup: eventLoopGroup,
            logger: logger
        )
    }

    /// The WebSocket handshake, following redirects. With `rawSink` (a raw endpoint, not BLIP) any
    /// subprotocol answered (or none) is accepted, and the sink is attached as the upgrade completes,
    /// before any frame is read.
    static func handshake(
        to urlString: String,
        configuration: Configuration,
        rawSink: (any FrameSink)?,
        eventLoopGroup: any EventLoopGroup,
        logger: Logger
    ) async throws -> BLIPWebSocketTransport {
        guard var url = BLIPWebSocketURL(urlString) else {
            throw BLIPConnectionError(.handshakeFailed, "not a ws:// or wss:// URL: \(urlString)")
        }
        var headers = configuration.headers
        self.addCredentials(of: url, configured: configuration.credentials, to: &headers, logger: logger)
        var redirects = HandshakeRedirects(maximum: configuration.maximumRedirects)
        while true {
            do {
                return try await self.attempt(
                    url,
                    headers: headers,
                    configuration: configuration,
                    rawSink: rawSink,
                    eventLoopGroup: eventLoopGroup,
                    logger: logger
                )
            } catch let error as BLIPHandshakeError {
                let next = try redirects.follow(error, from: url)
                if !next.hasSameOrigin(as: url) {
                    // Credentials and session cookies belong to the origin they were meant for.
                    headers.remove("Authorization")
                    headers.remove("Cookie")
                }
                // Configured credentials are in the headers already, and leave them with the origin.
                self.addCredentials(of: next, configured: nil, to: &headers, logger: logger)
                logger.debug("redirected", metadata: ["blip.url": "\(url)", "blip.location": "\(next)"])
                url = next
            }
        }
    }

    /// The configured credentials, or else the URL's user and password as `Authorization: Basic`, unless
    /// the headers already authorize. A session cookie replaces a cookie of the same name among the
    /// headers' others.
    private static func addCredentials(
        of url: BLIPWebSocketURL,
        configured: BLIPCredentials?,
        to headers: inout HTTPFields,
        logger: Logger
    ) {
        if let configured, configured.headerName == "Cookie" {
            let name = configured.headerValue.prefix { $0 != "=" }
            let others = headers.cookies.filter { $0.prefix { $0 != "=" } != name }.map(String.init)
            headers.remove("Cookie")
            headers.add(name: "Cookie", value: (others + [configured.headerValue]).joined(separator: "; "))
        }
        // Configured credentials of any kind stand in for the URL's.
        let authorization: String?
        if let configured {
            authorization = configured.headerName == "Authorization" ? configured.headerValue : nil
        } else {
            authorization = url.basicAuthorization
        }
        guard let authorization else { return }
        if headers.contains("Authorization") {
            logger.warning("the credentials are not sent: the configuration's Authorization header wins")
            return
        }
        headers.add(name: "Authorization", value: authorization)
    }

    /// One request: the upgrade, or a ``BLIPHandshakeError`` saying what the server answered instead.
    private static func attempt(
        _ url: BLIPWebSocketURL,
        headers fields: HTTPFields,
        configuration: Configuration,
        rawSink: (any FrameSink)?,
        eventLoopGroup: any EventLoopGroup,
        logger: Logger
    ) async throws -> BLIPWebSocketTransport {
        let tlsContext = url.isSecure ? try self.makeTLSContext(configuration.tls) : nil
        let offered = configuration.usesSeedDialect ? [] : configuration.subprotocols
        var headers = HTTPHeaders()
        headers.add(name: "Host", value: url.hostHeader)
        for field in fields where field.name != .cookie { headers.add(name: field.name.rawName, value: field.value) }
        // One Cookie line (RFC 6265 5.4), however many fields hold the cookies.
        let cookies = fields[values: .cookie]
        if !cookies.isEmpty { headers.add(name: "Cookie", value: cookies.joined(separator: "; ")) }
        let head = HTTPRequestHead(version: .http1_1, method: .GET, uri: url.target, headers: headers)
        let settings = BLIPWebSocketHandler.Settings(
            role: .client,
            heartbeatInterval: configuration.heartbeatInterval.map(TimeAmount.init),
            heartbeatTimeout: TimeAmount(configuration.heartbeatTimeout),
            closeTimeout: TimeAmount(configuration.closeTimeout),
            frameSize: configuration.connection.frameSize,
            maximumMessageSize: configuration.maximumMessageSize,
            logger: logger
        )
        let proxy =
            try configuration.proxy
            ?? configuration.proxyEnvironment.flatMap {
                try BLIPProxy.fromEnvironment(host: url.host, port: url.port, isSecure: url.isSecure, environment: $0)
            }
        if let proxy { try SOCKS5Tunnel.check(proxy, host: url.host) }
        let result = eventLoopGroup.any().makePromise(of: BLIPWebSocketTransport.self)
        let handshakeTimeout = configuration.handshakeTimeout
        // TLS, when wanted, and the upgrade: at once on a direct connection, through the tunnel once it is open.
        let addWebSocketHandlers = { @Sendable (channel: any Channel) throws in
            let sync = channel.pipeline.syncOperations
            if let tlsContext {
                try sync.addHandler(
                    try self.makeTLSHandler(tlsContext, host: url.host, tls: configuration.tls)
                )
            }
            let upgrader = BLIPClientUpgrader(
                offered: offered,
                sessionToken: configuration.usesSeedDialect ? nil : configuration.sessionToken,
                usesSeedDialect: configuration.usesSeedDialect || rawSink != nil,
                maximumMessageSize: configuration.maximumMessageSize,
                settings: settings,
                captureDirectory: configuration.captureDirectory,
                rawSink: rawSink,
                result: result
            )
            try sync.addHTTPClientHandlers(
                leftOverBytesStrategy: .forwardBytes,
                withClientUpgrade: (
                    upgraders: [upgrader],
                    completionHandler: { context in
                        context.pipeline.syncOperations.removeHandler(name: "blip-handshake", promise: nil)
                    }
                )
            )
            try sync.addHandler(
                HandshakeHandler(head: head, url: url, upgrader: upgrader, result: result),
                name: "blip-handshake"
            )
        }
        let bootstrap = ClientBootstrap(group: eventLoopGroup)
            .connectTimeout(TimeAmount(configuration.connectTimeout))
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    guard let proxy else { return try addWebSocketHandlers(channel) }
                    let opened = {
                        do { try addWebSocketHandlers(channel) } catch { result.fail(error) }
                    }
                    try ProxyTunnel.addHandlers(
                        channel.pipeline.syncOperations,
                        proxy: proxy,
                        host: url.host,
                        port: url.port,
                        deadline: .now() + TimeAmount(handshakeTimeout),
                        opened: opened,
                        failed: { result.fail($0) }
                    )
                }
            }
        let channel: any Channel
        let (host, port) = proxy.map { ($0.host, $0.port) } ?? (url.host, url.port)
        do {
            // An address literal needs no resolver: NIO's runs getaddrinfo on a Dispatch queue, one more hop
            // that a busy process can make wait past the connect timeout.
            if let address = try? SocketAddress(ipAddress: host, port: port) {
                channel = try await bootstrap.connect(to: address).get()
            } else {
                channel = try await bootstrap.connect(host: host, port: port).get()
            }
        } catch {
            if let proxy {
                let failure = BLIPProxyError(code: .unreachable, proxy: proxy.description, underlying: error)
                result.fail(failure)
                throw failure
            }
            result.fail(error)
            throw BLIPConnectionError(
                .transportFailed,
                "could not connect to \(url): \(SocketFailureText.describe(error))",
                underlying: error
            )
        }
        channel.closeFuture.whenComplete { _ in
            result.fail(BLIPConnectionError(.handshakeFailed, "the connection closed during the WebSocket handshake"))
        }
        let timeout = configuration.handshakeTimeout
        let deadline = channel.eventLoop.scheduleTask(in: TimeAmount(timeout)) {
            result.fail(BLIPConnectionError(.timedOut, "\(url) did not complete the handshake within \(timeout)"))
        }
        result.futureResult.whenComplete { _ in deadline.cancel() }
        do {
            let transport = try await result.futureResult.get()
            logger.debug(
                "connected",
                metadata: ["blip.url": "\(url)", "blip.subprotocol": "\(transport.subprotocol ?? "none")"]
            )
            return transport
        } catch  where error is BLIPConnectionError || error is BLIPHandshakeError || error is BLIPProxyError {
            channel.close(promise: nil)
            throw error
        } catch {
            channel.close(promise: nil)
            if TLSFailureText.isTLS(error) { throw TLSFailureText.failure(error, url: url) }
            throw BLIPConnectionError(.handshakeFailed, "the handshake with \(url) failed: \(error)", underlying: error)
        }
    }

    package static func makeTLSContext(_ tls: TLS) throws -> NIOSSLContext {
        var configuration = tls.configuration ?? TLSConfiguration.makeClientConfiguration()
        if case .pemFile(let path) = tls.trustRoots {
            configuration.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(path))
        }
        let pinned = tls.pinnedCertificateSHA256 != nil || !tls.pinnedChainSHA256.isEmpty
        if pinned || tls.customVerification != nil {
            // Pins and a custom callback replace NIOSSL's checks, name included (``CertificatePinVerification``
            // makes its own). Not `.none` either, whatever the base says: NIOSSL would not call them at all.
            configuration.certificateVerification = .noHostnameVerification
        }
        switch tls.clientCertificate?.source {
        case .files(let chain, let key):
            configuration.certificateChain = try NIOSSLCertificate.fromPEMFile(chain).map { .certificate($0) }
            configuration.privateKey = .privateKey(try NIOSSLPrivateKey(file: key, format: .pem))
        case .pem(let chain, let key):
            configuration.certificateChain = try NIOSSLCertificate.fromPEMBytes(Array(chain.utf8)).map {
                .certificate($0)
            }
            configuration.privateKey = .privateKey(try NIOSSLPrivateKey(bytes: Array(key.utf8), format: .pem))
        case nil:
            break
        }
        return try NIOSSLContext(configuration: configuration)
    }

    package static func makeTLSHandler(_ context: NIOSSLContext, host: String, tls: TLS) throws -> NIOSSLClientHandler {
        // SNI takes names only: no IP literals.
        let name = tls.serverName ?? host
        let serverHostname = (try? SocketAddress(ipAddress: name, port: 0)) != nil ? nil : name
        if let custom = tls.customVerification {
            return try NIOSSLClientHandler(context: context, serverHostname: serverHostname) { custom($0, $1) }
        }
        guard tls.pinnedCertificateSHA256 != nil || !tls.pinnedChainSHA256.isEmpty else {
            return try NIOSSLClientHandler(context: context, serverHostname: serverHostname)
        }
        let pins = CertificatePinVerification(
            leafPin: tls.pinnedCertificateSHA256,
            chainPins: Set(tls.pinnedChainSHA256),
            serverName: name
        )
        return try NIOSSLClientHandler(context: context, serverHostname: serverHostname) {
            pins.verify($0, promise: $1)
        }
    }
}

/// NIO's WebSocket client upgrader checks the key and accept headers; this adds the subprotocol offer
/// and check, and installs our own frame writing (word-wide masking) instead of NIO's encoder.
final class BLIPClientUpgrader: NIOHTTPClientProtocolUpgrader, Sendable {
    private let inner = NIOWebSocketClientUpgrader(upgradePipelineHandler: { channel, _ in
        channel.eventLoop.makeSucceededVoidFuture()
    })
    let offered: [String]
    /// Offered after `offered` in the same header, never accepted as the server's choice.
    let sessionToken: String?
    let usesSeedDialect: Bool
    let maximumMessageSize: Int
    let settings: BLIPWebSocketHandler.Settings
    let captureDirectory: String?
    let rawSink: (any FrameSink)?
    let result: EventLoopPromise<BLIPWebSocketTransport>

    init(
        offered: [String],
        sessionToken: String? = nil,
        usesSeedDialect: Bool,
        maximumMessageSize: Int,
        settings: BLIPWebSocketHandler.Settings,
        captureDirectory: String?,
        rawSink: (any FrameSink)? = nil,
        result: EventLoopPromise<BLIPWebSocketTransport>
    ) {
        self.rawSink = rawSink
        self.captureDirectory = captureDirectory
        self.offered = offered
        self.sessionToken = sessionToken
        self.usesSeedDialect = usesSeedDialect
        self.maximumMessageSize = maximumMessageSize
        self.settings = settings
        self.result = result
    }

    var supportedProtocol: String { self.inner.supportedProtocol }
    var requiredUpgradeHeaders: [String] { self.inner.requiredUpgradeHeaders }

    func addCustom(upgradeRequestHeaders: inout HTTPHeaders) {
        self.inner.addCustom(upgradeRequestHeaders: &upgradeRequestHeaders)
        let entries = self.offered + (self.sessionToken.map { [BLIPSubprotocol.sessionTokenPrefix + $0] } ?? [])
        if !entries.isEmpty {
            upgradeRequestHeaders.add(name: "Sec-WebSocket-Protocol", value: entries.joined(separator: ","))
        }
    }

    /// Whether a 101 is a valid WebSocket upgrade, the subprotocol aside: `Upgrade: websocket` and the
    /// right `Sec-WebSocket-Accept`.
    func isWebSocketUpgrade(_ response: HTTPResponseHead) -> Bool {
        let upgrade = response.headers[canonicalForm: "Upgrade"].map { $0.lowercased() }
        return upgrade.contains(self.supportedProtocol.lowercased())
            && self.inner.shouldAllowUpgrade(upgradeResponse: response)
    }

    func shouldAllowUpgrade(upgradeResponse: HTTPResponseHead) -> Bool {
        guard self.inner.shouldAllowUpgrade(upgradeResponse: upgradeResponse) else { return false }
        // The seed dialect (and a raw endpoint) take whatever the server answers; BLIP needs a BLIP
        // subprotocol that was offered.
        if self.usesSeedDialect { return true }
        let chosen = Self.chosenSubprotocol(upgradeResponse, offered: self.offered)
        return chosen.flatMap(BLIPSubprotocol.dialect(for:)) != nil
    }

    /// The subprotocol the server picked, if it is one we offered.
    static func chosenSubprotocol(_ response: HTTPResponseHead, offered: [String]) -> String? {
        let chosen = BLIPSubprotocol.parseOffers(response.headers["Sec-WebSocket-Protocol"])
        guard chosen.count == 1, offered.contains(chosen[0]) else { return nil }
        return chosen[0]
    }

    func upgrade(context: ChannelHandlerContext, upgradeResponse: HTTPResponseHead) -> EventLoopFuture<Void> {
        let channel = context.channel
        return channel.eventLoop.makeCompletedFuture {
            let subprotocol = Self.chosenSubprotocol(upgradeResponse, offered: self.offered)
            let dialect: BLIPDialect =
                self.usesSeedDialect ? .seed : (subprotocol.flatMap(BLIPSubprotocol.dialect(for:)) ?? .blip3)
            let capture = try self.captureDirectory.map {
                try BLIPFrameCapture.forNewConnection(
                    under: $0,
                    dialect: dialect,
                    counter: BLIPWebSocketClient.captureCounter
                )
            }
            let handler = BLIPWebSocketHandler(settings: self.settings, capture: capture)
            let sync = channel.pipeline.syncOperations
            try sync.addHandler(ByteToMessageHandler(WebSocketFrameDecoder(maxFrameSize: self.maximumMessageSize)))
            try sync.addHandler(handler)  // reassembles fragmented messages itself
            // Frames that came with the 101 response follow at once: a raw sink takes them from the first.
            if let rawSink = self.rawSink { handler.start(rawSink) }
            self.result.succeed(
                BLIPWebSocketTransport(
                    dialect: dialect,
                    subprotocol: subprotocol,
                    handler: handler,
                    channel: channel,
                    handshakeResponse: BLIPHandshakeResponse(upgradeResponse, subprotocol: subprotocol)
                )
            )
        }
    }
}
