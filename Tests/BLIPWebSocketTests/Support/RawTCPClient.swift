import NIOCore
import NIOPosix
import NIOSSL

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
    private let recorder: NIOLoopBound<Recorder>

    private init(channel: any Channel, closed: EventLoopFuture<ServerClose>, recorder: NIOLoopBound<Recorder>) {
        self.channel = channel
        self.closed = closed
        self.recorder = recorder
    }

    /// Connects to `port` on loopback, over TLS with `tls`. The timeout only catches a hang: NIO's default
    /// of 10 s has run out on a busy machine while the other suites kept the event loops busy.
    static func connect(
        port: Int,
        group: any EventLoopGroup = rawPeerEventLoops,
        tls: NIOSSLContext? = nil
    ) async throws -> RawTCPClient {
        let loop = group.next()
        let closed = loop.makePromise(of: ServerClose.self)
        let recorder = loop.makePromise(of: NIOLoopBound<Recorder>.self)
        do {
            let channel = try await ClientBootstrap(group: loop)
                .connectTimeout(.seconds(30))
                .channelInitializer { channel in
                    channel.eventLoop.makeCompletedFuture {
                        if let tls {
                            try channel.pipeline.syncOperations.addHandler(
                                NIOSSLClientHandler(context: tls, serverHostname: "localhost")
                            )
                        }
                        let handler = Recorder(closed: closed)
                        try channel.pipeline.syncOperations.addHandler(handler)
                        recorder.succeed(NIOLoopBound(handler, eventLoop: channel.eventLoop))
                    }
                }
                .connect(to: try SocketAddress(ipAddress: "127.0.0.1", port: port))
                .get()
            return RawTCPClient(
                channel: channel,
                closed: closed.futureResult,
                recorder: try await recorder.futureResult.get()
            )
        } catch {
            closed.fail(error)
            recorder.fail(error)
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

    /// Waits at most `limit` for the server to have sent `marker` (the end of a response head, say) and
    /// returns what it sent up to and including it; nil if it did not in time or closed first.
    func received(through marker: String, within limit: TimeAmount) async -> [UInt8]? {
        let loop = self.channel.eventLoop
        let found = loop.makePromise(of: [UInt8]?.self)
        let recorder = self.recorder
        loop.execute { recorder.value.wait(for: Array(marker.utf8), found) }
        let timer = loop.scheduleTask(in: limit) { found.succeed(nil) }
        self.closed.whenComplete { _ in loop.execute { found.succeed(nil) } }  // after any last read
        defer { timer.cancel() }
        return (try? await found.futureResult.get()) ?? nil
    }

    func close() async {
        try? await self.channel.close()
    }

    private final class Recorder: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer

        let closed: EventLoopPromise<ServerClose>
        let start = ContinuousClock.now
        var bytes: [UInt8] = []
        private var waiter: (marker: [UInt8], promise: EventLoopPromise<[UInt8]?>)?

        init(closed: EventLoopPromise<ServerClose>) {
            self.closed = closed
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            self.bytes += Self.unwrapInboundIn(data).readableBytesView
            self.checkWaiter()
        }

        func wait(for marker: [UInt8], _ promise: EventLoopPromise<[UInt8]?>) {
            self.waiter = (marker, promise)
            self.checkWaiter()
        }

        private func checkWaiter() {
            guard let waiter = self.waiter, let range = self.bytes.firstRange(of: waiter.marker) else { return }
            self.waiter = nil
            waiter.promise.succeed(Array(self.bytes[..<range.upperBound]))
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
