internal import NIOCore
internal import NIOExtras
internal import NIOHTTP1

/// Opens the way through a proxy before anything of the WebSocket handshake is added: once it is open the
/// proxy's handlers are gone and the channel is a plain byte stream to the server.
enum ProxyTunnel {
    /// Adds the handlers for the proxy's kind to a channel being initialized. `opened` runs on the channel's
    /// loop once the tunnel is open (and its handlers removed); `failed` gets why not as a
    /// ``BLIPProxyError``, after which the channel closes.
    static func addHandlers(
        _ pipeline: ChannelPipeline.SynchronousOperations,
        proxy: BLIPProxy,
        host: String,
        port: Int,
        deadline: NIODeadline,
        opened: @escaping () -> Void,
        failed: @escaping (BLIPProxyError) -> Void
    ) throws {
        let add =
            switch proxy.scheme {
            case .httpConnect: Self.addHTTPConnectHandlers
            case .socks5: SOCKS5Tunnel.addHandlers
            }
        try add(pipeline, proxy, host, port, deadline, opened, failed)
    }

    /// An HTTP proxy's `CONNECT` tunnel, with swift-nio-extras' handler.
    static func addHTTPConnectHandlers(
        _ pipeline: ChannelPipeline.SynchronousOperations,
        proxy: BLIPProxy,
        host: String,
        port: Int,
        deadline: NIODeadline,
        opened: @escaping () -> Void,
        failed: @escaping (BLIPProxyError) -> Void
    ) throws {
        let eventLoop = pipeline.eventLoop
        let uriHost = BLIPWebSocketURL.uriHost(host)
        var headers = HTTPHeaders()
        headers.add(name: "Host", value: "\(uriHost):\(port)")
        if let authorization = proxy.basicAuthorization {
            headers.add(name: "Proxy-Authorization", value: authorization)
        }

        let encoder = HTTPRequestEncoder()
        let decoder = ByteToMessageHandler(HTTPResponseDecoder(leftOverBytesStrategy: .forwardBytes))
        let recorder = ProxyResponseRecorder()
        let promise = eventLoop.makePromise(of: Void.self)
        let connect = NIOHTTP1ProxyConnectHandler(
            targetHost: uriHost,
            targetPort: port,
            headers: headers,
            deadline: deadline,
            promise: promise
        )
        try pipeline.addHandler(encoder)
        try pipeline.addHandler(decoder)
        try pipeline.addHandler(recorder)
        try pipeline.addHandler(connect)

        let pipelineBox = NIOLoopBound(pipeline, eventLoop: eventLoop)
        promise.futureResult.assumeIsolated().whenComplete { outcome in
            switch outcome {
            case .success:
                // The CONNECT handler has removed itself; the HTTP codec goes too (the server speaks only after
                // the client: TLS or the upgrade request). The decoder also watches writes, and leaves only once
                // its read is over: the next handlers come after it has gone.
                let pipeline = pipelineBox.value
                let decoderRemoved = eventLoop.makePromise(of: Void.self)
                pipeline.removeHandler(recorder, promise: nil)
                pipeline.removeHandler(encoder, promise: nil)
                pipeline.removeHandler(decoder, promise: decoderRemoved)
                decoderRemoved.futureResult.assumeIsolated().whenComplete { removal in
                    switch removal {
                    case .success: opened()
                    case .failure(let error):
                        failed(BLIPProxyError(code: .closed, proxy: proxy.description, underlying: error))
                    }
                }
            case .failure(let error):
                failed(Self.proxyError(error, proxy: proxy, response: recorder.head, decodingError: recorder.error))
            }
        }
    }

    /// What the proxy's answer (or silence) means, from swift-nio-extras' error and the response head.
    static func proxyError(
        _ error: any Error,
        proxy: BLIPProxy,
        response: HTTPResponseHead?,
        decodingError: (any Error)?
    ) -> BLIPProxyError {
        let status = response.map { Int($0.status.code) }
        let reason = response?.status.reasonPhrase
        let headers = response.map { HTTPFields($0.headers) } ?? [:]
        func make(_ kind: BLIPProxyError.Code, underlying: (any Error)? = error) -> BLIPProxyError {
            BLIPProxyError(
                code: kind,
                proxy: proxy.description,
                status: status,
                reason: reason,
                headers: headers,
                underlying: underlying
            )
        }
        if let decodingError { return make(.invalidResponse, underlying: decodingError) }
        let timedOut = (error as? NIOHTTP1ProxyConnectHandler.Error) == .httpProxyHandshakeTimeout()
        switch status {
        // Some proxies (tinyproxy) answer wrong credentials with 401 and WWW-Authenticate: the tunnel is not
        // open, so it is the proxy asking all the same.
        case 401, 407: return make(.authenticationRequired, underlying: nil)
        case .some(let code) where !(200..<300).contains(code): return make(.refused, underlying: nil)
        case .some: return make(timedOut ? .timedOut : .invalidResponse)
        case nil: return make(timedOut ? .timedOut : .closed)
        }
    }
}

/// Keeps the proxy's response head (swift-nio-extras' error does not expose its status or headers), and
/// closes the connection on an answer that is not HTTP.
final class ProxyResponseRecorder: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = HTTPClientResponsePart
    typealias InboundOut = HTTPClientResponsePart

    private(set) var head: HTTPResponseHead?
    private(set) var error: (any Error)?

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        if case .head(let head) = Self.unwrapInboundIn(data) { self.head = head }
        context.fireChannelRead(data)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        if self.error == nil { self.error = error }
        context.close(promise: nil)
    }
}
