import BLIP
import Foundation
import NIOCore
import NIOPosix
import Synchronization

/// A WebSocket server written by hand on a raw TCP channel, for scripting a misbehaving peer byte by byte:
/// it answers the handshake (with the subprotocol given), parses the client's frames, and sends whatever
/// bytes a test gives it, well-formed or not.
final class ScriptedWebSocketServer: Sendable {
    let listener: any Channel
    private let accepted: EventLoopPromise<ScriptedWebSocketConnection>

    init(subprotocol: String?) async throws {
        let accepted = rawPeerEventLoops.any().makePromise(of: ScriptedWebSocketConnection.self)
        self.accepted = accepted
        self.listener = try await ServerBootstrap(group: rawPeerEventLoops)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    let connection = ScriptedWebSocketConnection(channel: channel)
                    try channel.pipeline.syncOperations.addHandler(
                        ScriptedWebSocketHandler(connection: connection, subprotocol: subprotocol, accepted: accepted)
                    )
                }
            }
            .bind(host: "127.0.0.1", port: 0)
            .get()
    }

    var port: Int { self.listener.localAddress!.port! }

    /// The first connection, once its handshake is answered.
    func connection() async throws -> ScriptedWebSocketConnection {
        try await self.accepted.futureResult.get()
    }

    func close() async {
        self.accepted.fail(BLIPConnectionError(.connectionClosed, "server closed"))
        try? await self.listener.close()
    }
}

/// A frame the client sent, unmasked.
struct ClientFrame: Sendable {
    var fin: Bool
    var opcode: UInt8
    var payload: [UInt8]

    var closeCode: UInt16? {
        guard self.opcode == 0x8, self.payload.count >= 2 else { return nil }
        return UInt16(self.payload[0]) << 8 | UInt16(self.payload[1])
    }
}

/// One accepted connection: the client's frames as they arrive, and raw writes.
final class ScriptedWebSocketConnection: Sendable {
    let channel: any Channel
    let frames: AsyncStream<ClientFrame>
    let framesContinuation: AsyncStream<ClientFrame>.Continuation
    /// Whether a close frame from the client is answered at once (then the TCP connection closed, as a
    /// server does). Off, the test answers it when it chooses.
    let answersClose = Atomic<Bool>(true)

    init(channel: any Channel) {
        self.channel = channel
        (self.frames, self.framesContinuation) = AsyncStream.makeStream(of: ClientFrame.self)
    }

    /// Writes bytes as they are (a WebSocket frame, or part of one).
    func send(_ bytes: [UInt8]) async throws {
        try await self.channel.writeAndFlush(ByteBuffer(bytes: bytes))
    }

    /// An unmasked server frame.
    func sendFrame(opcode: UInt8, _ payload: [UInt8], fin: Bool = true) async throws {
        try await self.send(WebSocketBytes.frame(opcode: opcode, payload, fin: fin))
    }

    func sendClose(_ code: UInt16) async throws {
        try await self.sendFrame(opcode: 0x8, [UInt8(code >> 8), UInt8(code & 0xFF)])
    }

    /// Closes the TCP connection without a close handshake.
    func drop() async {
        try? await self.channel.close()
    }

    var isOpen: Bool { self.channel.isActive }
}

/// WebSocket frames as bytes.
enum WebSocketBytes {
    static func frame(
        opcode: UInt8,
        _ payload: [UInt8],
        fin: Bool = true,
        rsv: UInt8 = 0,
        maskKey: [UInt8]? = nil
    ) -> [UInt8] {
        var bytes: [UInt8] = [(fin ? 0x80 : 0) | (rsv << 4) | opcode]
        let mask: UInt8 = maskKey == nil ? 0 : 0x80
        switch payload.count {
        case ..<126:
            bytes.append(mask | UInt8(payload.count))
        case ...0xFFFF:
            bytes += [mask | 126, UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)]
        default:
            bytes.append(mask | 127)
            bytes += (0..<8).reversed().map { UInt8((payload.count >> ($0 * 8)) & 0xFF) }
        }
        if let maskKey {
            bytes += maskKey
            bytes += payload.enumerated().map { $0.element ^ maskKey[$0.offset % 4] }
        } else {
            bytes += payload
        }
        return bytes
    }
}

private final class ScriptedWebSocketHandler: ChannelInboundHandler {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    let connection: ScriptedWebSocketConnection
    let subprotocol: String?
    let accepted: EventLoopPromise<ScriptedWebSocketConnection>
    var bytes: [UInt8] = []
    var upgraded = false

    init(
        connection: ScriptedWebSocketConnection,
        subprotocol: String?,
        accepted: EventLoopPromise<ScriptedWebSocketConnection>
    ) {
        self.connection = connection
        self.subprotocol = subprotocol
        self.accepted = accepted
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        self.bytes += Self.unwrapInboundIn(data).readableBytesView
        if !self.upgraded {
            guard let response = HandWrittenHandshake.response(consuming: &self.bytes, subprotocol: self.subprotocol)
            else { return }
            self.upgraded = true
            context.writeAndFlush(Self.wrapOutboundOut(ByteBuffer(string: response)), promise: nil)
            self.accepted.succeed(self.connection)
        }
        while let frame = self.parseFrame() {
            self.connection.framesContinuation.yield(frame)
            if frame.opcode == 0x8, self.connection.answersClose.load(ordering: .acquiring) {
                let reply = WebSocketBytes.frame(opcode: 0x8, Array(frame.payload.prefix(2)))
                let channel = context.channel
                context.writeAndFlush(Self.wrapOutboundOut(ByteBuffer(bytes: reply))).whenComplete { _ in
                    channel.close(promise: nil)
                }
            }
        }
    }

    func channelInactive(context: ChannelHandlerContext) {
        self.connection.framesContinuation.finish()
        self.accepted.fail(BLIPConnectionError(.connectionClosed, "closed before the handshake"))
        context.fireChannelInactive()
    }

    /// The next whole client frame (always masked), if the bytes hold one.
    private func parseFrame() -> ClientFrame? {
        guard self.bytes.count >= 2 else { return nil }
        var length = Int(self.bytes[1] & 0x7F)
        var offset = 2
        if length == 126 {
            guard self.bytes.count >= 4 else { return nil }
            length = Int(self.bytes[2]) << 8 | Int(self.bytes[3])
            offset = 4
        } else if length == 127 {
            guard self.bytes.count >= 10 else { return nil }
            length = self.bytes[2..<10].reduce(0) { $0 << 8 | Int($1) }
            offset = 10
        }
        let masked = self.bytes[1] & 0x80 != 0
        let keyLength = masked ? 4 : 0
        guard self.bytes.count >= offset + keyLength + length else { return nil }
        let key = Array(self.bytes[offset..<(offset + keyLength)])
        var payload = Array(self.bytes[(offset + keyLength)..<(offset + keyLength + length)])
        if masked {
            for index in payload.indices { payload[index] ^= key[index % 4] }
        }
        let frame = ClientFrame(fin: self.bytes[0] & 0x80 != 0, opcode: self.bytes[0] & 0x0F, payload: payload)
        self.bytes.removeFirst(offset + keyLength + length)
        return frame
    }
}
