internal import NIOCore
internal import NIOSOCKS

/// Asks a SOCKS5 proxy for a connection to the server with swift-nio-extras' NIOSOCKS, before anything of
/// the WebSocket handshake is added: once the proxy has connected, its handlers are gone and the channel is
/// a plain byte stream to the server.
enum SOCKS5Tunnel {
    /// SOCKS5 carries a server's name in at most 255 bytes (NIOSOCKS traps past that), and RFC 1929 each of
    /// the username and password.
    static func check(_ proxy: BLIPProxy, host: String) throws {
        guard proxy.scheme == .socks5 else { return }
        if host.utf8.count > 255 {
            throw BLIPProxyError(
                code: .invalidResponse,
                proxy: proxy.description,
                reason: "a SOCKS5 proxy takes server names of at most 255 bytes"
            )
        }
        guard let username = proxy.username else { return }
        let lengths = [username.utf8.count, (proxy.password ?? "").utf8.count]
        if lengths.contains(where: { $0 > 255 }) || username.isEmpty {
            throw BLIPProxyError(
                code: .authenticationRequired,
                proxy: proxy.description,
                reason: "a SOCKS5 username and password have 1 to 255 bytes each (RFC 1929)"
            )
        }
    }

    /// Adds the proxy's handlers, as ``ProxyTunnel/addHandlers(_:proxy:host:port:deadline:opened:failed:)``
    /// describes.
    static func addHandlers(
        _ pipeline: ChannelPipeline.SynchronousOperations,
        proxy: BLIPProxy,
        host: String,
        port: Int,
        deadline: NIODeadline,
        opened: @escaping () -> Void,
        failed: @escaping (BLIPProxyError) -> Void
    ) throws {
        // An address literal goes as an address, a name as a name for the proxy to resolve.
        let target: SOCKSAddress =
            if let address = try? SocketAddress(ipAddress: host, port: port) {
                .address(address)
            } else {
                .domain(host, port: port)
            }
        if let username = proxy.username {
            try pipeline.addHandler(SOCKS5PasswordAuthenticator(username: username, password: proxy.password ?? ""))
        }
        let client = SOCKSClientHandler(targetAddress: target)
        try pipeline.addHandler(client)
        try pipeline.addHandler(
            SOCKS5TunnelWatcher(client: client, proxy: proxy, deadline: deadline, opened: opened, failed: failed)
        )
    }
}

/// Waits for NIOSOCKS to report the connection open, then takes the proxy's handlers out of the pipeline; or
/// turns its error, an early close or the deadline into a ``BLIPProxyError``.
final class SOCKS5TunnelWatcher: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer

    private let client: SOCKSClientHandler
    private let proxy: BLIPProxy
    private let deadline: NIODeadline
    private var opened: (() -> Void)?
    private var failed: ((BLIPProxyError) -> Void)?
    private var timeout: Scheduled<Void>?

    init(
        client: SOCKSClientHandler,
        proxy: BLIPProxy,
        deadline: NIODeadline,
        opened: @escaping () -> Void,
        failed: @escaping (BLIPProxyError) -> Void
    ) {
        self.client = client
        self.proxy = proxy
        self.deadline = deadline
        self.opened = opened
        self.failed = failed
    }

    func handlerAdded(context: ChannelHandlerContext) {
        let loopBoundContext = NIOLoopBound(context, eventLoop: context.eventLoop)
        self.timeout = context.eventLoop.assumeIsolated().scheduleTask(deadline: self.deadline) {
            let context = loopBoundContext.value
            self.fail(BLIPProxyError(code: .timedOut, proxy: self.proxy.description), context: context)
        }
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.timeout?.cancel()
    }

    func userInboundEventTriggered(context: ChannelHandlerContext, event: Any) {
        guard event is SOCKSProxyEstablishedEvent, let opened = self.opened else {
            context.fireUserInboundEventTriggered(event)
            return
        }
        self.opened = nil
        self.failed = nil
        self.timeout?.cancel()
        // The next handlers first: bytes that came after the proxy's reply pass through to them as NIOSOCKS
        // leaves.
        opened()
        let pipeline = context.pipeline.syncOperations
        pipeline.removeHandler(self.client, promise: nil)
        pipeline.removeHandler(context: context, promise: nil)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        self.fail(Self.proxyError(error, proxy: self.proxy), context: context)
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.fail(BLIPProxyError(code: .closed, proxy: self.proxy.description), context: context)
        context.fireChannelInactive()
    }

    private func fail(_ error: BLIPProxyError, context: ChannelHandlerContext) {
        self.timeout?.cancel()
        self.opened = nil
        guard let failed = self.failed else { return }
        self.failed = nil
        failed(error)
        context.close(promise: nil)
    }

    /// What NIOSOCKS's error (or the authenticator's) means to a caller.
    static func proxyError(_ error: any Error, proxy: BLIPProxy) -> BLIPProxyError {
        switch error {
        case let refusal as SOCKSError.ConnectionFailed:
            return BLIPProxyError(
                code: .refused,
                proxy: proxy.description,
                socksReply: refusal.reply.value,
                reason: Self.replyText[Int(refusal.reply.value)] ?? "unassigned reply"
            )
        case let selection as SOCKSError.InvalidAuthenticationSelection
        where selection.selection == .noneAcceptable:
            let offered = proxy.username == nil ? "no authentication" : "no authentication or a password"
            return BLIPProxyError(
                code: .authenticationRequired,
                proxy: proxy.description,
                reason: "the proxy accepts none of the methods offered (\(offered))"
            )
        case let rejection as SOCKS5PasswordAuthenticator.Rejected:
            return BLIPProxyError(
                code: .authenticationRequired,
                proxy: proxy.description,
                reason: "the proxy rejected the username and password (status \(rejection.status))"
            )
        case is IOError, is ChannelError:
            return BLIPProxyError(code: .closed, proxy: proxy.description, underlying: error)
        default:
            return BLIPProxyError(code: .invalidResponse, proxy: proxy.description, underlying: error)
        }
    }

    /// RFC 1928, section 6.
    private static let replyText = [
        1: "general SOCKS server failure", 2: "connection not allowed by ruleset", 3: "network unreachable",
        4: "host unreachable", 5: "connection refused", 6: "TTL expired", 7: "command not supported",
        8: "address type not supported",
    ]
}
