internal import BLIP
internal import BLIPWebSocket
internal import HTTPTypes
public import Hummingbird
public import HummingbirdCore
public import Logging
public import NIOCore
internal import NIOHTTP1
internal import NIOHTTPTypes
internal import NIOHTTPTypesHTTP1
internal import NIOWebSocket
internal import ServiceLifecycle

/// A Hummingbird child channel that serves HTTP/1.1 with the application's router and upgrades to BLIP
/// the WebSocket requests that a `router.blip(…)` route accepts.
///
/// An upgrade request runs through the BLIP router and its middleware first. When a `blip` route accepts
/// it, the channel answers 101 and hands the connection to the same WebSocket handler as the standalone
/// `BLIPWebSocketServer` (framing, heartbeat, close handshake, back-pressure). Any other answer (a 401 from
/// an authenticator, a 404 for an unknown path, the route's own refusal) goes back to the client as it is,
/// status, headers and body, and the connection closes. Requests without `Upgrade` go to the
/// application's responder as on a plain HTTP/1 server.
public struct HTTP1BLIPUpgradeChannel: ServerChildChannel, HTTPChannelHandler {
    public struct Configuration: Sendable {
        /// The HTTP/1 side (decoder limits, idle timeout, extra handlers), as for Hummingbird's `HTTP1Channel`.
        public var http1: HTTP1Channel.Configuration
        /// The largest single WebSocket frame accepted; a message is also bounded by its endpoint's
        /// ``BLIPEndpointConfiguration/maximumMessageSize``.
        public var maximumFrameSize: Int

        public init(http1: HTTP1Channel.Configuration = .init(), maximumFrameSize: Int = 1 << 20) {
            self.http1 = http1
            self.maximumFrameSize = maximumFrameSize
        }
    }

    /// What became of a connection's first request.
    enum UpgradeResult: Sendable {
        case blip(
            BLIPConnection,
            drainTimeout: Duration,
            onConnection: (@Sendable (BLIPConnection) async throws -> Void)?
        )
        case notUpgraded(NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>)
        case refused(NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>, refusal: CollectedResponse)
    }

    public struct Value: ServerChildChannelValue {
        let upgradeResult: EventLoopFuture<UpgradeResult>
        public let channel: any Channel
    }

    public let responder: HTTPChannelHandler.Responder
    let configuration: Configuration
    let decide: @Sendable (HTTPRequestHead, any Channel, UpgradeDecision.Peer, Logger) async -> UpgradeDecision

    /// `responder` answers plain HTTP (the application's router); `blipResponder` decides upgrades (a
    /// router with `blip` routes, which may be the same one).
    public init<BLIPResponder: HTTPResponder>(
        responder: @escaping HTTPChannelHandler.Responder,
        blipResponder: BLIPResponder,
        configuration: Configuration = Configuration()
    ) where BLIPResponder.Context: BLIPUpgradeRequestContext {
        self.responder = responder
        self.configuration = configuration
        self.decide = { head, channel, peer, logger in
            await UpgradeDecision.make(
                head: head,
                channel: channel,
                peer: peer,
                logger: logger,
                responder: blipResponder
            )
        }
    }

    public func setup(channel: any Channel, logger: Logger) -> EventLoopFuture<Value> {
        channel.eventLoop.makeCompletedFuture {
            let decision = NIOLoopBoundBox<UpgradeDecision?>(nil, eventLoop: channel.eventLoop)
            // Frames are written by BLIP's own handler, one buffer each (BLIPServerUpgrader).
            let upgrader = BLIPServerUpgrader<UpgradeResult>(
                maximumFrameSize: self.configuration.maximumFrameSize,
                shouldUpgrade: { channel, head in
                    // Read on the event loop, where the channel's handlers may be looked at.
                    let peer = UpgradeDecision.Peer(channel)
                    let promise = channel.eventLoop.makePromise(of: UpgradeDecision.self)
                    promise.completeWithTask { await self.decide(head, channel, peer, logger) }
                    return promise.futureResult.map { decided in
                        decision.value = decided
                        if case .upgrade(let headers, _, _) = decided { return headers }
                        return nil
                    }
                },
                upgradePipelineHandler: { channel, _ in
                    channel.eventLoop.makeCompletedFuture {
                        guard case .upgrade(_, let accepted, let request) = decision.value else {
                            throw BLIPConnectionError(.handshakeFailed, "upgrade no longer acceptable")
                        }
                        let connection = try UpgradedServerChannel.makeConnection(
                            on: channel,
                            dialect: accepted.dialect,
                            subprotocol: accepted.subprotocol,
                            upgradeRequest: request,
                            identity: accepted.identity,
                            router: accepted.router,
                            configuration: accepted.configuration.connection,
                            settings: UpgradedServerChannel.Settings(
                                heartbeatInterval: accepted.configuration.heartbeatInterval.map(TimeAmount.init),
                                heartbeatTimeout: TimeAmount(accepted.configuration.heartbeatTimeout),
                                closeTimeout: TimeAmount(accepted.configuration.closeTimeout),
                                maximumMessageSize: accepted.configuration.maximumMessageSize,
                                frameSize: accepted.configuration.connection.frameSize,
                                logger: logger
                            )
                        )
                        return .blip(
                            connection,
                            drainTimeout: accepted.configuration.drainTimeout,
                            onConnection: accepted.onConnection
                        )
                    }
                }
            )
            let upgradeConfiguration = NIOTypedHTTPServerUpgradeConfiguration<UpgradeResult>(
                upgraders: [upgrader],
                notUpgradingCompletionHandler: { channel in
                    channel.eventLoop.makeCompletedFuture {
                        let sync = channel.pipeline.syncOperations
                        try sync.addHandler(HTTP1ToHTTPServerCodec(secure: false))
                        try sync.addHandlers(self.configuration.http1.additionalChannelHandlers())
                        try sync.addHandler(
                            HTTPConnectionStateHandler(
                                idleTimeout: self.configuration.http1.idleTimeout.map { .init($0) },
                                logger: logger
                            )
                        )
                        let http = try NIOAsyncChannel<HTTPRequestPart, HTTPResponsePart>(
                            wrappingChannelSynchronously: channel,
                            configuration: .init(isOutboundHalfClosureEnabled: true)
                        )
                        if case .refuse(let refusal) = decision.value { return .refused(http, refusal: refusal) }
                        return .notUpgraded(http)
                    }
                }
            )
            var pipeline = NIOUpgradableHTTPServerPipelineConfiguration<UpgradeResult>(
                upgradeConfiguration: upgradeConfiguration
            )
            pipeline.enablePipelining = false  // NIOAsyncChannel takes one request at a time
            pipeline.enableErrorHandling = false  // Hummingbird answers errors itself
            pipeline.enableResponseHeaderValidation = false  // HTTPTypes validated the fields already
            let decoder = self.configuration.http1.httpDecoder
            pipeline.decoderConfiguration.maxHeaderFieldSize = decoder.maxHeaderFieldSize
            pipeline.decoderConfiguration.maxHeaderListSize = decoder.maxHeaderListSize
            pipeline.decoderConfiguration.maxHeaderFieldCount = decoder.maxHeaderFieldCount
            let result = try channel.pipeline.syncOperations.configureUpgradableHTTPServerPipeline(
                configuration: pipeline
            )
            return Value(upgradeResult: result, channel: channel)
        }
    }

    public func handle(value: Value, logger: Logger) async {
        let result: UpgradeResult
        do {
            result = try await value.upgradeResult.get()
        } catch {
            logger.debug("upgrade failed", metadata: ["blip.error": "\(error)"])
            return
        }
        switch result {
        case .notUpgraded(let http):
            await self.handleHTTP(asyncChannel: http, logger: logger)
        case .refused(let http, let refusal):
            await refusal.write(to: http, logger: logger)
        case .blip(let connection, let drainTimeout, let onConnection):
            // The application's graceful shutdown drains the connection; its cancellation closes it.
            _ = await withGracefulShutdownHandler {
                await connection.run(scope: onConnection)
            } onGracefulShutdown: {
                Task { await connection.closeGracefully(drainTimeout: drainTimeout, reason: "server shutting down") }
            }
        }
    }
}
