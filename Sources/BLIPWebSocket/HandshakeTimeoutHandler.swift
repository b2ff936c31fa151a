internal import Logging
package import NIOCore

/// Closes a connection whose WebSocket upgrade has not completed in time, counted from the TCP accept.
///
/// Without it a client that sends nothing, or one byte a second, holds its socket (and a place under the
/// server's connection limit) forever. The server removes it once the upgrade is done; a refused request
/// closes the connection itself, which cancels the timer.
final class HandshakeTimeoutHandler: ChannelInboundHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer

    static let name = "blip-handshake-timeout"

    private let timeout: TimeAmount
    private let logger: Logger
    private var timer: Scheduled<Void>?

    init(timeout: TimeAmount, logger: Logger) {
        self.timeout = timeout
        self.logger = logger
    }

    func handlerAdded(context: ChannelHandlerContext) {
        if context.channel.isActive { self.start(context) }
    }

    func channelActive(context: ChannelHandlerContext) {
        self.start(context)
        context.fireChannelActive()
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.cancel()
        context.fireChannelInactive()
    }

    func handlerRemoved(context: ChannelHandlerContext) {
        self.cancel()
    }

    private func start(_ context: ChannelHandlerContext) {
        guard self.timer == nil else { return }
        self.timer = context.eventLoop.assumeIsolated().scheduleTask(in: self.timeout) {
            self.logger.debug(
                "closing a connection that did not complete its handshake in time",
                metadata: ["blip.remote": "\(context.channel.remoteAddress.map { "\($0)" } ?? "?")"]
            )
            context.close(promise: nil)
        }
    }

    private func cancel() {
        self.timer?.cancel()
        self.timer = nil
    }
}

extension ChannelPipeline.SynchronousOperations {
    /// Lifts the handshake's time limit from a connection whose answer may take longer (a large static
    /// file), which bounds itself another way.
    package func removeHandshakeTimeout() {
        self.removeHandler(name: HandshakeTimeoutHandler.name, promise: nil)
    }
}
