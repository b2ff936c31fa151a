internal import NIOCore
internal import NIOSOCKS

/// Username/password authentication (RFC 1929) for NIOSOCKS, which offers only "no authentication": this
/// handler sits between it and the network, offers both methods in its place, and when the proxy picks the
/// password, sends it and waits for the verdict before NIOSOCKS sees the proxy's choice, as "no
/// authentication". NIOSOCKS then asks for the connection as usual. Gone from the pipeline once it is done.
final class SOCKS5PasswordAuthenticator: ChannelDuplexHandler, RemovableChannelHandler {
    typealias InboundIn = ByteBuffer
    typealias InboundOut = ByteBuffer
    typealias OutboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    /// The proxy did not accept the username and password.
    struct Rejected: Error, Hashable {
        var status: UInt8
    }

    private enum State {
        case awaitingGreeting, awaitingMethod, awaitingVerdict, done
    }

    private static let version: UInt8 = 5
    private static let noAuthentication: UInt8 = 0
    private static let password: UInt8 = 2

    private let username: [UInt8]
    private let password: [UInt8]
    private var state = State.awaitingGreeting
    private var received: ByteBuffer?

    /// Each of 1 to 255 bytes (checked by ``SOCKS5Tunnel/check(_:host:)``).
    init(username: String, password: String) {
        self.username = Array(username.utf8)
        self.password = Array(password.utf8)
    }

    func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
        guard case .awaitingGreeting = self.state else {
            context.write(data, promise: promise)
            return
        }
        // NIOSOCKS's first write is its greeting, offering "no authentication" only.
        self.state = .awaitingMethod
        var greeting = context.channel.allocator.buffer(capacity: 4)
        greeting.writeBytes([Self.version, 2, Self.noAuthentication, Self.password])
        context.write(Self.wrapOutboundOut(greeting), promise: promise)
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        switch self.state {
        case .awaitingGreeting, .done:
            context.fireChannelRead(data)
            return
        case .awaitingMethod, .awaitingVerdict:
            var bytes = Self.unwrapInboundIn(data)
            self.received.setOrWriteBuffer(&bytes)
        }
        guard var received = self.received, received.readableBytes >= 2,
            let first = received.readInteger(as: UInt8.self), let second = received.readInteger(as: UInt8.self)
        else { return }
        self.received = received

        switch self.state {
        case .awaitingMethod where first == Self.version && second == Self.password:
            self.state = .awaitingVerdict
            var request = context.channel.allocator.buffer(capacity: 3 + self.username.count + self.password.count)
            request.writeInteger(UInt8(1))  // the subnegotiation's version
            request.writeInteger(UInt8(self.username.count))
            request.writeBytes(self.username)
            request.writeInteger(UInt8(self.password.count))
            request.writeBytes(self.password)
            context.writeAndFlush(Self.wrapOutboundOut(request), promise: nil)
        case .awaitingMethod:
            // "No authentication", none acceptable, or not SOCKS5: NIOSOCKS takes it from here.
            self.finish(context: context, choice: [first, second])
        case .awaitingVerdict where first != 1:
            self.state = .done
            context.fireErrorCaught(SOCKSError.InvalidProtocolVersion(actual: first))
            context.close(promise: nil)
        case .awaitingVerdict where second == 0:
            self.finish(context: context, choice: [Self.version, Self.noAuthentication])
        case .awaitingVerdict:
            self.state = .done
            context.fireErrorCaught(Rejected(status: second))
            context.close(promise: nil)
        case .awaitingGreeting, .done:
            break
        }
    }

    /// Hands NIOSOCKS the method choice it understands, and whatever followed it, and leaves.
    private func finish(context: ChannelHandlerContext, choice: [UInt8]) {
        self.state = .done
        var forward = context.channel.allocator.buffer(capacity: 2 + (self.received?.readableBytes ?? 0))
        forward.writeBytes(choice)
        if var rest = self.received { forward.writeBuffer(&rest) }
        self.received = nil
        context.fireChannelRead(Self.wrapInboundOut(forward))
        context.pipeline.syncOperations.removeHandler(context: context, promise: nil)
    }
}
