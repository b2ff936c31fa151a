internal import BLIPWebSocket
internal import NIOCore
internal import NIOPosix
internal import NIOSSL

/// One client's connection through ``BLIPInspectingProxy``: reads the client's request head, opens the
/// upstream connection on the same event loop and sends the head on, then relays bytes both ways as they
/// come. Each side reads only while the other can take writes, so a peer that stops reading holds back the
/// other one, as it would without the proxy, and the proxy buffers at most a socket's high-water mark per
/// direction. Confined to the client channel's event loop.
final class ProxiedConnection {
    let inspector: ConnectionInspector
    let clientHandler: RelayHandler
    private var upstreamHandler: RelayHandler?
    private let upstream: BLIPWebSocketURL
    private let upstreamTLS: (NIOSSLContext, BLIPWebSocketClient.TLS)?
    private let configuration: BLIPInspectingProxy.Configuration
    private let connections: ProxiedConnections
    private var state = State.readingHead(ByteBuffer())
    private var clientOpen = true
    private var upstreamOpen = false
    private var finished = false
    /// Whether the upstream sent anything: counted as it is relayed, since a read error can end a batch
    /// before it is inspected (NIO then skips channelReadComplete).
    private var upstreamAnswered = false
    /// What each side sent in the current read batch, relayed and not yet inspected: inspecting after the
    /// batch's flush keeps the decoding and the log off the relayed bytes' way (a sequential round trip
    /// through the decoding proxy waited for both before).
    private var uninspectedFromClient: [ByteBuffer] = []
    private var uninspectedFromServer: [ByteBuffer] = []

    private enum State {
        case readingHead(ByteBuffer)
        /// The head is on its way; bytes the client sent after it wait here (reading is paused meanwhile).
        case connecting(ByteBuffer)
        case relaying
        case refused
    }

    init(
        inspector: ConnectionInspector,
        upstream: BLIPWebSocketURL,
        upstreamTLS: (NIOSSLContext, BLIPWebSocketClient.TLS)?,
        configuration: BLIPInspectingProxy.Configuration,
        connections: ProxiedConnections
    ) {
        self.connections = connections
        self.inspector = inspector
        self.upstream = upstream
        self.upstreamTLS = upstreamTLS
        self.configuration = configuration
        self.clientHandler = RelayHandler(side: .client)
        self.clientHandler.connection = self
    }

    func mayRead(_ side: RelayHandler.Side) -> Bool {
        switch side {
        case .upstream:
            return self.clientHandler.isWritable
        case .client:
            switch self.state {
            case .readingHead: return true
            case .connecting, .refused: return false
            case .relaying: return self.upstreamHandler?.isWritable ?? false
            }
        }
    }

    func received(_ bytes: ByteBuffer, from side: RelayHandler.Side) {
        if side == .upstream {
            self.upstreamAnswered = true
            self.clientHandler.write(bytes)
            self.uninspectedFromServer.append(bytes)
            return
        }
        switch self.state {
        case .relaying:
            self.upstreamHandler?.write(bytes)
            self.uninspectedFromClient.append(bytes)
        case .readingHead(var head):
            head.writeImmutableBuffer(bytes)
            self.readHead(head)
        case .connecting(var early):
            early.writeImmutableBuffer(bytes)
            self.state = .connecting(early)
        case .refused:
            break
        }
    }

    /// The end of a read batch: the bytes go out first, and are inspected while the peer reads them.
    func readComplete(from side: RelayHandler.Side) {
        switch side {
        case .client: self.upstreamHandler?.flush()
        case .upstream: self.clientHandler.flush()
        }
        self.inspectRelayed(from: side)
    }

    /// Hands the inspector what `side` sent since the last time, in order. The list is taken first: the
    /// observer the inspector reports to is not ours.
    private func inspectRelayed(from side: RelayHandler.Side) {
        switch side {
        case .client:
            let chunks = self.uninspectedFromClient
            self.uninspectedFromClient = []
            for chunk in chunks { self.inspector.clientBytes(chunk) }
        case .upstream:
            let chunks = self.uninspectedFromServer
            self.uninspectedFromServer = []
            for chunk in chunks { self.inspector.serverBytes(chunk) }
        }
    }

    /// `side` can take writes again: the other side may read.
    func writable(_ side: RelayHandler.Side) {
        switch side {
        case .client: self.upstreamHandler?.resumeReading()
        case .upstream: self.clientHandler.resumeReading()
        }
    }

    private func readHead(_ buffer: ByteBuffer) {
        let parsed: (RelayedHTTPHead, length: Int)?
        do {
            parsed = try RelayedHTTPHead.parse(buffer, limit: self.configuration.maximumHeadSize)
        } catch {
            self.refuse(status: "400 Bad Request", "blip proxy: \(error)")
            return
        }
        guard let (head, length) = parsed else {
            self.state = .readingHead(buffer)
            return
        }
        var rest = buffer
        rest.moveReaderIndex(forwardBy: length)
        self.inspector.requestHead(head, length: length)
        self.state = .connecting(rest)
        self.connect(sending: self.forwarded(head))
    }

    /// The client's head with the upstream's `Host`, and its target under the upstream URL's path.
    private func forwarded(_ head: RelayedHTTPHead) -> RelayedHTTPHead {
        var head = head
        let defaultPort = self.upstream.isSecure ? 443 : 80
        let host = self.upstream.host.contains(":") ? "[\(self.upstream.host)]" : self.upstream.host
        let authority = self.upstream.port == defaultPort ? host : "\(host):\(self.upstream.port)"
        head = head.replacingValues(of: ["Host"], with: authority)
        let prefix = String(self.upstream.target.prefix { $0 != "?" })
        if prefix != "/", let target = head.target {
            let parts = head.startLine.split(separator: " ", maxSplits: 2)
            let joined = (prefix.hasSuffix("/") ? String(prefix.dropLast()) : prefix) + target
            head.startLine = "\(parts[0]) \(joined) \(parts[2])"
        }
        return head
    }

    private func connect(sending head: RelayedHTTPHead) {
        guard let eventLoop = self.clientHandler.eventLoop else { return }
        let bound = NIOLoopBound(self, eventLoop: eventLoop)
        let tls = self.upstreamTLS
        let host = self.upstream.host
        let connections = self.connections
        ClientBootstrap(group: eventLoop)
            .connectTimeout(TimeAmount(self.configuration.connectTimeout))
            .channelOption(.tcpOption(.tcp_nodelay), value: 1)
            .channelInitializer { channel in
                do {
                    if let (context, options) = tls {
                        try channel.pipeline.syncOperations.addHandler(
                            BLIPWebSocketClient.makeTLSHandler(context, host: host, tls: options)
                        )
                    }
                    let handler = RelayHandler(side: .upstream)
                    handler.connection = bound.value
                    try channel.pipeline.syncOperations.addHandler(handler)
                    bound.value.upstreamHandler = handler
                    connections.add(channel, isClient: false)
                    return channel.eventLoop.makeSucceededVoidFuture()
                } catch {
                    return channel.eventLoop.makeFailedFuture(error)
                }
            }
            .connect(host: self.upstream.host, port: self.upstream.port)
            .whenComplete { result in
                let connection = bound.value
                switch result {
                case .success(let channel): connection.upstreamConnected(channel, head: head)
                case .failure(let error): connection.upstreamFailed(error)
                }
            }
    }

    private func upstreamConnected(_ channel: any Channel, head: RelayedHTTPHead) {
        self.upstreamOpen = true
        guard self.clientOpen, case .connecting(let early) = self.state, let upstream = self.upstreamHandler else {
            self.state = .refused  // the client left meanwhile: nothing to relay
            channel.close(promise: nil)
            return
        }
        self.state = .relaying
        upstream.write(ByteBuffer(string: head.description))
        if early.readableBytes > 0 {
            self.inspector.clientBytes(early)
            upstream.write(early)
        }
        upstream.flush()
        self.clientHandler.resumeReading()
    }

    private func upstreamFailed(_ error: any Error) {
        self.upstreamHandler = nil
        let reason = "cannot reach \(self.upstream): \(error)"
        self.inspector.emit(.upstreamUnreachable(reason))
        self.refuse(status: "502 Bad Gateway", "blip proxy: \(reason)")
        self.finishIfClosed()
    }

    /// Answers the client itself (only when there is no upstream answer to relay), then closes.
    private func refuse(status: String, _ text: String) {
        self.state = .refused
        let body = text + "\n"
        let response =
            "HTTP/1.1 \(status)\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: \(body.utf8.count)\r\n"
            + "Connection: close\r\n\r\n\(body)"
        self.clientHandler.write(ByteBuffer(string: response))
        self.clientHandler.closeAfterWrites()
    }

    /// A side's channel failed. An upstream failing before it answered anything (a TLS handshake that its
    /// certificate fails, say) is the proxy's to answer, as when it cannot be reached.
    func failed(_ side: RelayHandler.Side, _ error: any Error) {
        guard side == .upstream, case .relaying = self.state, !self.upstreamAnswered else { return }
        let reason = "the connection to \(self.upstream) failed before it answered: \(error)"
        self.inspector.emit(.upstreamUnreachable(reason))
        self.refuse(status: "502 Bad Gateway", "blip proxy: \(reason)")
    }

    func closed(_ side: RelayHandler.Side) {
        self.inspectRelayed(from: side)  // a batch that ended with the connection
        switch side {
        case .client:
            self.clientOpen = false
            self.upstreamHandler?.closeAfterWrites()
        case .upstream:
            self.upstreamOpen = false
            self.clientHandler.closeAfterWrites()
        }
        self.finishIfClosed()
    }

    private func finishIfClosed() {
        guard !self.clientOpen, !self.upstreamOpen, !self.finished else { return }
        if case .connecting = self.state { return }  // the connect's outcome finishes it
        self.finished = true
        self.inspectRelayed(from: .client)
        self.inspectRelayed(from: .upstream)
        self.inspector.finish()
    }
}

/// The handler on each of a proxied connection's two channels: hands what it reads to the connection,
/// and reads only when the connection says the other side can take it.
final class RelayHandler: ChannelDuplexHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    enum Side {
        case client
        case upstream
    }

    let side: Side
    /// Cleared when the handler leaves its pipeline, which ends the cycle with the connection.
    var connection: ProxiedConnection?
    private var context: ChannelHandlerContext?
    private var readPending = false

    init(side: Side) {
        self.side = side
    }

    var eventLoop: (any EventLoop)? { self.context?.eventLoop }
    var isWritable: Bool { self.context?.channel.isWritable ?? false }

    func handlerAdded(context: ChannelHandlerContext) {
        self.context = context
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.context = nil
        self.connection = nil
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        self.connection?.received(Self.unwrapInboundIn(data), from: self.side)
    }

    func channelReadComplete(context: ChannelHandlerContext) {
        self.connection?.readComplete(from: self.side)
    }

    func channelWritabilityChanged(context: ChannelHandlerContext) {
        if context.channel.isWritable { self.connection?.writable(self.side) }
        context.fireChannelWritabilityChanged()
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.connection?.closed(self.side)
        context.fireChannelInactive()
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        self.connection?.failed(self.side, error)
        context.close(promise: nil)
    }

    func read(context: ChannelHandlerContext) {
        if self.connection?.mayRead(self.side) ?? true {
            context.read()
        } else {
            self.readPending = true
        }
    }

    func resumeReading() {
        guard self.readPending, let context = self.context else { return }
        self.readPending = false
        context.read()
    }

    func write(_ bytes: ByteBuffer) {
        self.context?.write(Self.wrapOutboundOut(bytes), promise: nil)
    }

    func flush() {
        self.context?.flush()
    }

    /// Closes once everything written before has gone out (the other side has closed).
    func closeAfterWrites() {
        guard let context = self.context else { return }
        let channel = context.channel
        context.writeAndFlush(Self.wrapOutboundOut(ByteBuffer())).whenComplete { _ in channel.close(promise: nil) }
    }
}
