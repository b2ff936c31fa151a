internal import BLIP
internal import NIOCore
internal import NIOHTTP1
internal import NIOSSL

/// Sends the upgrade request and, if the server does not switch protocols, fails the handshake with a
/// ``BLIPHandshakeError`` saying what it answered. It reads at most ``BLIPHandshakeError/bodyExcerptLimit``
/// bytes of the body and closes the connection then: a huge or endless body is not waited for.
final class HandshakeHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias OutboundOut = HTTPClientRequestPart

    private let head: HTTPRequestHead
    private let url: BLIPWebSocketURL
    private let upgrader: BLIPClientUpgrader
    private let result: EventLoopPromise<BLIPWebSocketTransport>
    private var sent = false
    private var response: HTTPResponseHead?
    private var body: [UInt8] = []
    /// Set once the error is out: later reads (bytes after a refused 101) are dropped.
    private var finished = false

    init(
        head: HTTPRequestHead,
        url: BLIPWebSocketURL,
        upgrader: BLIPClientUpgrader,
        result: EventLoopPromise<BLIPWebSocketTransport>
    ) {
        self.head = head
        self.url = url
        self.upgrader = upgrader
        self.result = result
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { self.send(context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        self.send(context)
        context.fireChannelActive()
    }

    private func send(_ context: ChannelHandlerContext) {
        guard !self.sent else { return }
        self.sent = true
        context.write(Self.wrapOutboundOut(.head(self.head)), promise: nil)
        context.writeAndFlush(Self.wrapOutboundOut(.end(nil)), promise: nil)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !self.finished else { return }
        switch Self.unwrapInboundIn(data) {
        case .head(let head):
            self.response = head
        case .body(let part):
            let room = BLIPHandshakeError.bodyExcerptLimit - self.body.count
            self.body += part.readableBytesView.prefix(room)
            if part.readableBytes > room { self.finish(context, bodyIsTruncated: true) }
        case .end:
            self.finish(context, bodyIsTruncated: false)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        // A body cut short still leaves a status worth reporting.
        if self.response != nil { self.finish(context, bodyIsTruncated: false) }
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if error is NIOHTTPClientUpgradeError { return }  // refused: the response head follows
        if self.response != nil, !self.finished {
            self.finish(context, bodyIsTruncated: false)  // a malformed body after the head
            return
        }
        let failure =
            TLSFailureText.isTLS(error)
            ? TLSFailureText.failure(error, url: self.url)
            : BLIPConnectionError(
                .transportFailed,
                "the connection to \(self.url) failed: \(SocketFailureText.describe(error))",
                underlying: error
            )
        self.result.fail(failure)
        context.close(promise: nil)
    }

    private func finish(_ context: ChannelHandlerContext, bodyIsTruncated: Bool) {
        guard !self.finished, let response = self.response else { return }
        self.finished = true
        let status = Int(response.status.code)
        var kind = BLIPHandshakeError.Code.of(status: status, body: self.body)
        var detail: String?
        let offered = self.upgrader.offered
        if kind == .subprotocolRefused {
            detail = "offered \(offered.isEmpty ? "no subprotocol" : offered.joined(separator: ", "))"
        }
        if response.status == .switchingProtocols {
            if !self.upgrader.isWebSocketUpgrade(response) {
                kind = .notWebSocket
                detail = "not a valid WebSocket upgrade (Upgrade, Sec-WebSocket-Accept)"
            } else {
                kind = .subprotocolRefused
                let chosen = response.headers["Sec-WebSocket-Protocol"].joined(separator: ",")
                let offered = offered.joined(separator: ", ")
                detail =
                    chosen.isEmpty
                    ? "the server accepted none of the subprotocols offered (\(offered))"
                    : "the server chose \(chosen), which was not offered (\(offered))"
            }
        }
        self.result.fail(
            BLIPHandshakeError(
                code: kind,
                url: self.url.description,
                status: status,
                reason: response.status.reasonPhrase,
                headers: HTTPFields(response.headers),
                body: self.body,
                bodyIsTruncated: bodyIsTruncated,
                detail: detail,
                offeredSubprotocols: offered
            )
        )
        context.close(promise: nil)
    }
}
