internal import NIOCore
internal import NIOHTTP1
internal import NIOWebSocket

/// NIO's WebSocket server upgrader checks the request's key and computes the accept header; this adds only
/// NIO's frame decoder after the 101, not its encoder: the connection's handler writes each frame's header
/// into the room it left before the frame.
///
/// NIO's encoder can prepend the header only to a buffer nobody else holds, and inside its `write` the
/// message wrapping the frame still holds it, so it wrote every header as a buffer of its own: a second
/// write and a second piece of each `writev`, about 2 400 instructions per frame (callgrind).
final class BLIPServerUpgrader: HTTPServerProtocolUpgrader, Sendable {
    private let inner: NIOWebSocketServerUpgrader
    private let maximumFrameSize: Int
    private let upgradePipelineHandler: @Sendable (any Channel, HTTPRequestHead) -> EventLoopFuture<Void>

    init(
        maximumFrameSize: Int,
        shouldUpgrade: @escaping @Sendable (any Channel, HTTPRequestHead) -> EventLoopFuture<HTTPHeaders?>,
        upgradePipelineHandler: @escaping @Sendable (any Channel, HTTPRequestHead) -> EventLoopFuture<Void>
    ) {
        self.inner = NIOWebSocketServerUpgrader(
            maxFrameSize: maximumFrameSize,
            automaticErrorHandling: false,
            shouldUpgrade: shouldUpgrade,
            upgradePipelineHandler: { channel, _ in channel.eventLoop.makeSucceededVoidFuture() }
        )
        self.maximumFrameSize = maximumFrameSize
        self.upgradePipelineHandler = upgradePipelineHandler
    }

    var supportedProtocol: String { self.inner.supportedProtocol }
    var requiredUpgradeHeaders: [String] { self.inner.requiredUpgradeHeaders }

    func buildUpgradeResponse(
        channel: any Channel,
        upgradeRequest: HTTPRequestHead,
        initialResponseHeaders: HTTPHeaders
    ) -> EventLoopFuture<HTTPHeaders> {
        self.inner.buildUpgradeResponse(
            channel: channel,
            upgradeRequest: upgradeRequest,
            initialResponseHeaders: initialResponseHeaders
        )
    }

    func upgrade(context: ChannelHandlerContext, upgradeRequest: HTTPRequestHead) -> EventLoopFuture<Void> {
        let channel = context.channel
        let maximumFrameSize = self.maximumFrameSize
        return channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.addHandler(
                ByteToMessageHandler(WebSocketFrameDecoder(maxFrameSize: maximumFrameSize))
            )
        }.flatMap {
            self.upgradePipelineHandler(channel, upgradeRequest)
        }
    }
}
