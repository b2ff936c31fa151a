package import NIOCore
package import NIOHTTP1
internal import NIOWebSocket

/// NIO's WebSocket server upgrader checks the request's key and computes the accept header; this adds only
/// NIO's frame decoder after the 101, not its encoder: the connection's handler writes each frame's header
/// into the room it left before the frame.
///
/// NIO's encoder can prepend the header only to a buffer nobody else holds, and inside its `write` the
/// message wrapping the frame still holds it, so it wrote every header as a buffer of its own: a second
/// write and a second piece of each `writev`, about 2 400 instructions per frame (callgrind).
///
/// Typed for a pipeline configured with NIO's typed upgrade (BLIPHummingbird); with a `Void` result it is
/// also an untyped upgrader (the standalone server).
package final class BLIPServerUpgrader<UpgradeResult: Sendable>: NIOTypedHTTPServerProtocolUpgrader, Sendable {
    private let inner: NIOTypedWebSocketServerUpgrader<UpgradeResult>
    private let maximumFrameSize: Int
    private let upgradePipelineHandler: @Sendable (any Channel, HTTPRequestHead) -> EventLoopFuture<UpgradeResult>

    package init(
        maximumFrameSize: Int,
        shouldUpgrade: @escaping @Sendable (any Channel, HTTPRequestHead) -> EventLoopFuture<HTTPHeaders?>,
        upgradePipelineHandler: @escaping @Sendable (any Channel, HTTPRequestHead) -> EventLoopFuture<UpgradeResult>
    ) {
        // Only its checks of the request and its 101 headers are used.
        self.inner = NIOTypedWebSocketServerUpgrader(
            maxFrameSize: maximumFrameSize,
            enableAutomaticErrorHandling: false,
            shouldUpgrade: shouldUpgrade,
            upgradePipelineHandler: upgradePipelineHandler
        )
        self.maximumFrameSize = maximumFrameSize
        self.upgradePipelineHandler = upgradePipelineHandler
    }

    package var supportedProtocol: String { self.inner.supportedProtocol }
    package var requiredUpgradeHeaders: [String] { self.inner.requiredUpgradeHeaders }

    package func buildUpgradeResponse(
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

    package func upgrade(channel: any Channel, upgradeRequest: HTTPRequestHead) -> EventLoopFuture<UpgradeResult> {
        let maximumFrameSize = self.maximumFrameSize
        return channel.eventLoop.makeCompletedFuture {
            try channel.pipeline.syncOperations.addHandler(
                ByteToMessageHandler(UnmaskingFrameDecoder(maximumFrameSize: maximumFrameSize))
            )
        }.flatMap {
            self.upgradePipelineHandler(channel, upgradeRequest)
        }
    }
}

extension BLIPServerUpgrader: HTTPServerProtocolUpgrader where UpgradeResult == Void {
    package func upgrade(context: ChannelHandlerContext, upgradeRequest: HTTPRequestHead) -> EventLoopFuture<Void> {
        self.upgrade(channel: context.channel, upgradeRequest: upgradeRequest)
    }
}
