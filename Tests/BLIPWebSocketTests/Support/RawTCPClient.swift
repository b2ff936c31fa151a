import NIOCore
import NIOPosix

/// A TCP client that writes bytes exactly as given and records what the server answers until it closes,
/// for the tests of what our server does before any WebSocket upgrade (slow, silent or oversized requests).
final class RawTCPClient: Sendable {
    /// What the server sent before it closed the connection, and when it closed, counted from the connect.
    struct ServerClose: Sendable {
        var bytes: [UInt8]
        var after: Duration

        /// The response's status line, if any.
        var statusLine: String? {
            guard let end = self.bytes.firstRange(of: Array("\r\n".utf8)) else { return nil }
            return String(decoding: self.bytes[..<end.lowerBound], as: UTF8.self)
        }
    }

    let channel: any Channel
    private let closed: EventLoopFuture<ServerClose>

    private init(channel: any Channel, closed: EventLoopFuture<ServerClose>) {
        self.channel = channel
        self.closed = closed
    }

    /// Connects to `port` on loopback. The timeout only catches a hang: NIO's default of 10 s has run out
    /// on a busy machine while the other suites kept the event loops busy.
    static func connect(
        port: Int,
        group: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton
    ) async throws -> RawTCPClient {
        let loop = group.next()
        let closed = loop.makePromise(of: ServerClose.self)
        do {
            let channel = try await ClientBootstrap(group: loop)
                .connectTimeout(.seconds(30))
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        try channel.pipeline.syncOperations.addHandler(Recorder(closed: closed))
                    }
                }
                .connect(host: "127.0.0.1", port: port)
                .get()
            return RawTCPClient(channel: channel, closed: closed.futureResult)
        } catch {
            closed.fail(error)
            throw error
        }
    }

    /// Writes `bytes`; fails once the server has closed the connection.
    func send(_ bytes: [UInt8]) async throws {
        try await self.channel.writeAndFlush(ByteBuffer(bytes: bytes))
    }

    /// Waits at most `limit` for the server to close the connection; nil if it was still open then (this
    /// side closes it).
    func serverClose(within limit: TimeAmount) async -> ServerClose? {
        let outcome = self.channel.eventLoop.makePromise(of: ServerClose?.self)
        self.closed.whenComplete { outcome.completeWith($0.map { Optional($0) }) }
        let timer = self.channel.eventLoop.scheduleTask(in: limit) {
            outcome.succeed(nil)  // first come: a later close no longer counts
            self.channel.close(promise: nil)
        }
        defer { timer.cancel() }
        return try? await outcome.futureResult.get()
    }

    func close() async {
        try? await self.channel.close()
    }

    private final class Recorder: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer

        let closed: EventLoopPromise<ServerClose>
        let start = ContinuousClock.now
        var bytes: [UInt8] = []

        init(closed: EventLoopPromise<ServerClose>) {
            self.closed = closed
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            self.bytes += Self.unwrapInboundIn(data).readableBytesView
        }

        func channelInactive(context: ChannelHandlerContext) {
            self.closed.succeed(ServerClose(bytes: self.bytes, after: ContinuousClock.now - self.start))
            context.fireChannelInactive()
        }

        func errorCaught(context: ChannelHandlerContext, error: any Error) {
            context.close(promise: nil)  // a reset: the server went away
        }
    }
}
