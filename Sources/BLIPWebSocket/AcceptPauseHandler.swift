internal import Logging
internal import NIOCore

#if canImport(Glibc)
    internal import Glibc
#elseif canImport(Musl)
    internal import Musl
#elseif canImport(Darwin)
    internal import Darwin
#endif

/// Pauses accepting on a server's listening channel for a moment after accept fails for want of file
/// descriptors or memory, and logs accept failures at most once per interval.
///
/// While descriptors run out, connections wait in the listen backlog, so the listening socket stays
/// readable and every accept fails at once: without a pause the event loop spins on a full core until
/// descriptors are freed. NIO's `AcceptBackoffHandler` is meant for this but never acts here: a failed
/// accept leaves the channel's read pending, so no new `read` reaches it to delay (NIO 2.101). Turning
/// `autoRead` off takes the socket out of the poll set; turning it back on re-arms it.
final class AcceptPauseHandler: ChannelInboundHandler {
    typealias InboundIn = any Channel
    typealias InboundOut = any Channel

    /// Short enough that clients wait little once descriptors are freed, long enough that retrying costs
    /// nothing.
    static let pause = TimeAmount.milliseconds(100)

    private let logger: Logger
    private var limiter: LogRateLimiter
    private var resumption: Scheduled<Void>?

    init(logger: Logger, logInterval: TimeAmount = .seconds(10)) {
        self.logger = logger
        self.limiter = LogRateLimiter(interval: logInterval)
    }

    /// Whether retrying at once cannot help (a connection aborted before it was accepted can).
    static func needsPause(after error: IOError) -> Bool {
        [EMFILE, ENFILE, ENOBUFS, ENOMEM].contains(error.errnoCode)
    }

    func errorCaught(context: ChannelHandlerContext, error: any Error) {
        guard let ioError = error as? IOError else {
            context.fireErrorCaught(error)
            return
        }
        let pauses = Self.needsPause(after: ioError)
        if let failures = self.limiter.record() {
            self.logger.warning(
                "accepting connections failed",
                metadata: [
                    "blip.error": "\(ioError)",
                    "blip.failures": "\(failures)",
                    "blip.retry": "\(pauses ? "after \(Self.pause.nanoseconds / 1_000_000) ms" : "at once")",
                ]
            )
        }
        guard pauses, self.resumption == nil, let options = context.channel.syncOptions,
            (try? options.setOption(.autoRead, value: false)) != nil
        else { return }
        self.resumption = context.eventLoop.assumeIsolated().scheduleTask(in: Self.pause) {
            self.resumption = nil
            try? context.channel.syncOptions?.setOption(.autoRead, value: true)
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.resumption?.cancel()
        self.resumption = nil
        context.fireChannelInactive()
    }
}
