internal import Logging
internal import NIOCore

/// Enforces a server's maximum number of connections on its listening channel: a connection accepted
/// while the limit is reached is closed before anything is read from it. Every accepted connection
/// counts from its accept to its close, so connections still in their HTTP upgrade (or TLS handshake)
/// count as much as upgraded ones. Refusals are logged at most once per interval.
final class ConnectionLimitHandler: ChannelInboundHandler {
    typealias InboundIn = any Channel
    typealias InboundOut = any Channel

    private let limit: Int
    private let logger: Logger
    private var open = 0
    private var limiter: LogRateLimiter

    init(limit: Int, logger: Logger, logInterval: TimeAmount = .seconds(10)) {
        self.limit = limit
        self.logger = logger
        self.limiter = LogRateLimiter(interval: logInterval)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let child = Self.unwrapInboundIn(data)
        guard self.open < self.limit else {
            child.close(promise: nil)
            if let count = self.limiter.record() {
                self.logger.warning(
                    "refusing connections over the limit",
                    metadata: ["blip.limit": "\(self.limit)", "blip.refused": "\(count)"]
                )
            }
            return
        }
        self.open += 1
        child.closeFuture.hop(to: context.eventLoop).assumeIsolated().whenComplete { _ in
            self.open -= 1
        }
        context.fireChannelRead(data)
    }
}
