import BLIP
import BLIPEngine
import BLIPWebSocket
import BLIPWire
import NIOConcurrencyHelpers
import NIOCore
import NIOWebSocket
import Synchronization

/// A BLIP 3 client made of a raw WebSocket and an engine of its own, to play a peer that breaks the rules
/// (ignores ACKs, never reads, never finishes its messages) against our server, frame by frame.
///
/// Unchecked: ``write(_:)`` (the channel's writer and an atomic) may be called from a second task; the
/// engine and everything else belong to the test's task.
final class ForgingPeer: @unchecked Sendable {
    let engine: BLIPConnectionEngine
    let outbound: NIOAsyncChannelOutboundWriter<WebSocketFrame>
    /// The channel's event loop, which masks and writes every frame.
    let eventLoop: any EventLoop
    var inbound: NIOAsyncChannelInboundStream<WebSocketFrame>.AsyncIterator
    /// Frame bytes written so far.
    let bytesWritten = Atomic<Int>(0)
    /// Replies and errors received whole, by request number.
    var replies: [UInt64: (type: BLIPMessageType, properties: BLIPProperties, body: ByteBuffer)] = [:]
    var closeCode: UInt16?
    /// For a peer that writes hand-made frames (its engine knows nothing of them): replies are decoded
    /// without the engine.
    private let decoder: BLIPFrameDecoder?
    private var readers: [UInt64: (BLIPMessageReader, BLIPMessageType, ByteBuffer)] = [:]

    init(
        inbound: NIOAsyncChannelInboundStream<WebSocketFrame>,
        outbound: NIOAsyncChannelOutboundWriter<WebSocketFrame>,
        eventLoop: any EventLoop,
        configuration: BLIPEngineConfiguration = BLIPEngineConfiguration(dialect: .blip3),
        handMade: Bool = false
    ) {
        self.engine = BLIPConnectionEngine(configuration: configuration)
        self.outbound = outbound
        self.eventLoop = eventLoop
        self.inbound = inbound.makeAsyncIterator()
        self.decoder = handMade ? BLIPFrameDecoder(dialect: .blip3) : nil
    }

    /// Decodes a reply frame without the engine (the requests were hand-made).
    private func decodeReply(_ frame: ByteBuffer) throws {
        guard let decoder, case .data(let data) = try decoder.decode(frame), data.header.type != .request else {
            return
        }
        let number = data.header.messageNumber
        var (reader, type, body) =
            self.readers.removeValue(forKey: number)
            ?? (decoder.makeMessageReader(for: data.header), data.header.type, ByteBuffer())
        var piece = try reader.append(data.payload)
        body.writeBuffer(&piece)
        if data.header.flags.contains(.moreComing) {
            self.readers[number] = (reader, type, body)
        } else {
            try reader.finish()
            self.replies[number] = (type, reader.properties ?? [:], body)
        }
    }

    /// Writes every frame the engine has ready (ACKs too, unless `skippingACKs`).
    func flush(skippingACKs: Bool = false) async throws {
        var frames: [ByteBuffer] = []
        var buffer = ByteBuffer()
        while case .frame(let sent) = try self.engine.nextFrame(into: &buffer, now: .now()) {
            if !(skippingACKs && sent.header.type.isACK) { frames.append(buffer) }
            buffer = ByteBuffer()
        }
        for frame in frames { try await self.write(frame) }
    }

    /// Returns once the event loop has taken the frame. The channel's writer hands each frame to the loop as
    /// a task of its own and waits only when the socket is full; a debug build masks far slower than a test
    /// makes frames, so a flood queued seconds of masking ahead of every other connection on those loops
    /// (their handshakes timed out).
    func write(_ frame: ByteBuffer) async throws {
        try await self.outbound.write(RawWebSocketClient.frame(.binary, frame))
        try await self.eventLoop.submit {}.get()
        self.bytesWritten.add(frame.readableBytes, ordering: .relaxed)
    }

    /// Reads what the server sends, through the engine, until `done` holds, the server closes or the
    /// connection ends. Pings are answered. Returns whether `done` held.
    func read(until done: (ForgingPeer) -> Bool) async throws -> Bool {
        while !done(self) {
            guard let frame = try await self.inbound.next() else { return false }
            switch frame.opcode {
            case .binary where self.decoder != nil:
                try self.decodeReply(frame.unmaskedData)
            case .binary:
                let result = try self.engine.receive(frame.unmaskedData, now: .now())
                if case .messageStarted(let message)? = result.event, message.type != .request, message.isComplete {
                    self.replies[message.id.number] = (message.type, message.properties, message.body)
                }
                if case .bodyReceived(let id, _, true)? = result.event, !id.isRequest {
                    self.replies[id.number] = (.response, [:], ByteBuffer())
                }
            case .ping:
                try await self.outbound.write(RawWebSocketClient.frame(.pong, frame.unmaskedData))
            case .connectionClose:
                var data = frame.unmaskedData
                self.closeCode = data.readWebSocketErrorCode().map { UInt16(webSocketErrorCode: $0) } ?? 1005
                return done(self)
            default:
                break
            }
        }
        return true
    }
}

/// Frames a peer writes by hand, in order through one encoder (so CRCs are right), whatever the rules say.
/// Unchecked: one task at a time uses it (the test hands it to its writer task and leaves it there).
final class HandMadeFrames: @unchecked Sendable {
    let encoder = BLIPFrameEncoder(dialect: .blip3)

    /// One frame of request `number`: its properties if `first`, then `body`.
    func request(
        _ number: UInt64,
        profile: String? = nil,
        body: ByteBuffer,
        moreComing: Bool,
        noReply: Bool = false
    ) throws -> ByteBuffer {
        var data = ByteBuffer()
        if let profile { try self.encoder.writeProperties(["Profile": profile], into: &data) }
        var body = body
        data.writeBuffer(&body)
        var message = BLIPMessageData(data)
        var output = ByteBuffer()
        var flags: BLIPFrameFlags = moreComing ? [.moreComing] : []
        if noReply { flags.insert(.noReply) }
        _ = try self.encoder.encodeFrame(
            BLIPFrameHeader(messageNumber: number, type: .request, flags: flags),
            data: &message,
            endOfMessage: !moreComing,
            maximumFrameSize: 1 << 20,
            into: &output
        )
        return output
    }
}

/// A server whose accepted connections the test can watch.
final class WatchedServer: Sendable {
    let server: BLIPWebSocketServer
    let connections = NIOLockedValueBox<[BLIPConnection]>([])

    init(server: BLIPWebSocketServer) {
        self.server = server
    }

    var port: Int { self.server.port }
    var first: BLIPConnection? { self.connections.withLockedValue { $0.first } }
}

/// Runs a server on a free loopback port, keeping its connections, for the duration of `body`.
func withWatchedServer<T: Sendable>(
    _ configuration: BLIPWebSocketServer.Configuration,
    router: BLIPRouter,
    _ body: @Sendable (WatchedServer) async throws -> T
) async throws -> T {
    var configuration = configuration
    configuration.port = 0
    configuration.heartbeatInterval = nil
    let watched = WatchedServer(
        server: try await BLIPWebSocketServer.bind(configuration: configuration, router: router)
    )
    async let serving: Void = watched.server.run { accepted in
        watched.connections.withLockedValue { $0.append(accepted.connection) }
    }
    do {
        let result = try await body(watched)
        await watched.server.close()
        await serving
        return result
    } catch {
        await watched.server.close()
        await serving
        throw error
    }
}
