import BLIP
import BLIPWebSocket
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOHTTP1
import NIOPosix
import NIOWebSocket
import Testing

/// The event loops of the hand-driven peers below, apart from the singleton group that the BLIP servers and
/// clients under test use. A flooding peer queues one loop task per frame faster than a debug build masks
/// them (byte by byte in NIOWebSocket): on a shared loop, every connection queued behind that backlog, and
/// other suites' connects and handshakes ran out of time.
let rawPeerEventLoops = MultiThreadedEventLoopGroup(numberOfThreads: 2)

/// A plain NIO WebSocket client driven frame by frame, to talk to our server the way other software (or a
/// broken peer) would.
struct RawWebSocketClient {
    enum Upgrade: Sendable {
        case websocket(NIOAsyncChannel<WebSocketFrame, WebSocketFrame>, subprotocol: String?)
        case refused
    }

    let channel: NIOAsyncChannel<WebSocketFrame, WebSocketFrame>
    let subprotocol: String?
    var eventLoop: any EventLoop { self.channel.channel.eventLoop }

    static func connect(port: Int, path: String = "/", subprotocols: [String]) async throws -> RawWebSocketClient {
        let upgrade = try await ClientBootstrap(group: rawPeerEventLoops)
            .connectTimeout(.seconds(30))
            .connect(to: try SocketAddress(ipAddress: "127.0.0.1", port: port)) { channel in
                channel.eventLoop.makeCompletedFuture {
                    let upgrader = NIOTypedWebSocketClientUpgrader<Upgrade>(
                        maxFrameSize: 1 << 24,
                        upgradePipelineHandler: { channel, response in
                            channel.eventLoop.makeCompletedFuture {
                                let asyncChannel = try NIOAsyncChannel<WebSocketFrame, WebSocketFrame>(
                                    wrappingChannelSynchronously: channel
                                )
                                return .websocket(
                                    asyncChannel,
                                    subprotocol: response.headers.first(name: "Sec-WebSocket-Protocol")
                                )
                            }
                        }
                    )
                    var headers = HTTPHeaders()
                    headers.add(name: "Host", value: "127.0.0.1:\(port)")
                    if !subprotocols.isEmpty {
                        headers.add(name: "Sec-WebSocket-Protocol", value: subprotocols.joined(separator: ", "))
                    }
                    let configuration = NIOTypedHTTPClientUpgradeConfiguration<Upgrade>(
                        upgradeRequestHead: HTTPRequestHead(
                            version: .http1_1,
                            method: .GET,
                            uri: path,
                            headers: headers
                        ),
                        upgraders: [upgrader],
                        notUpgradingCompletionHandler: { channel in channel.eventLoop.makeSucceededFuture(.refused) }
                    )
                    var pipeline = NIOUpgradableHTTPClientPipelineConfiguration(upgradeConfiguration: configuration)
                    pipeline.leftOverBytesStrategy = .forwardBytes
                    return try channel.pipeline.syncOperations.configureUpgradableHTTPClientPipeline(
                        configuration: pipeline
                    )
                }
            }
        guard case .websocket(let channel, let subprotocol) = try await upgrade.get() else {
            throw BLIPConnectionError(.handshakeFailed, "refused")
        }
        return RawWebSocketClient(channel: channel, subprotocol: subprotocol)
    }

    /// A masked frame, as clients send.
    static func frame(_ opcode: WebSocketOpcode, _ data: ByteBuffer, fin: Bool = true) -> WebSocketFrame {
        WebSocketFrame(fin: fin, opcode: opcode, maskKey: .random(), data: data)
    }
}

/// A plain NIO WebSocket server, to act as a misbehaving or observing peer for our client.
final class RawWebSocketServer: Sendable {
    let channel: NIOAsyncChannel<EventLoopFuture<NIOAsyncChannel<WebSocketFrame, WebSocketFrame>>, Never>
    /// What the accepted connections received and when, stamped on their event loop as it happened (a
    /// task reading the frames may run seconds later on a busy machine).
    let timeline = NIOLockedValueBox<[RawPeerEvent]>([])

    /// `subprotocol(offered)` returns what to answer in `Sec-WebSocket-Protocol`, or nil for nothing.
    init(
        eventLoopGroup: any EventLoopGroup = rawPeerEventLoops,
        subprotocol: @escaping @Sendable ([String]) -> String?
    ) async throws {
        let timeline = self.timeline
        self.channel = try await ServerBootstrap(group: eventLoopGroup)
            .bind(host: "127.0.0.1", port: 0) { channel in
                channel.eventLoop.makeCompletedFuture {
                    let upgrader = NIOTypedWebSocketServerUpgrader<NIOAsyncChannel<WebSocketFrame, WebSocketFrame>>(
                        maxFrameSize: 1 << 24,
                        shouldUpgrade: { channel, head in
                            var headers = HTTPHeaders()
                            let offered = BLIPSubprotocol.parseOffers(head.headers["Sec-WebSocket-Protocol"])
                            if let answer = subprotocol(offered) {
                                headers.add(name: "Sec-WebSocket-Protocol", value: answer)
                            }
                            return channel.eventLoop.makeSucceededFuture(headers)
                        },
                        upgradePipelineHandler: { channel, _ in
                            channel.eventLoop.makeCompletedFuture {
                                timeline.withLockedValue { $0.append(RawPeerEvent(.upgraded)) }
                                channel.closeFuture.whenComplete { _ in
                                    timeline.withLockedValue { $0.append(RawPeerEvent(.closed)) }
                                }
                                try channel.pipeline.syncOperations.addHandler(RawPeerTimelineHandler(timeline))
                                return try NIOAsyncChannel<WebSocketFrame, WebSocketFrame>(
                                    wrappingChannelSynchronously: channel
                                )
                            }
                        }
                    )
                    let configuration = NIOTypedHTTPServerUpgradeConfiguration(
                        upgraders: [upgrader],
                        notUpgradingCompletionHandler: { channel in
                            channel.close().flatMapThrowing {
                                throw BLIPConnectionError(.handshakeFailed, "not upgraded")
                            }
                        }
                    )
                    return try channel.pipeline.syncOperations.configureUpgradableHTTPServerPipeline(
                        configuration: NIOUpgradableHTTPServerPipelineConfiguration(upgradeConfiguration: configuration)
                    )
                }
            }
    }

    var port: Int { self.channel.channel.localAddress!.port! }

    /// The first accepted WebSocket connection; the server stops listening then (each test takes one).
    func accept() async throws -> NIOAsyncChannel<WebSocketFrame, WebSocketFrame> {
        try await self.channel.executeThenClose { inbound, _ in
            for try await upgraded in inbound {
                return try await upgraded.get()
            }
            throw BLIPConnectionError(.connectionClosed, "server closed")
        }
    }

    func close() async {
        try? await self.channel.channel.close()
    }
}

/// One thing that happened to a ``RawWebSocketServer``'s connection, and when.
struct RawPeerEvent: Sendable {
    enum Kind: Sendable, Equatable {
        case upgraded
        case received(WebSocketOpcode)
        case closed
    }

    let kind: Kind
    let time: NIODeadline

    init(_ kind: Kind) {
        self.kind = kind
        self.time = .now()
    }
}

/// Stamps each frame a raw peer receives, on the event loop, then passes it on.
final class RawPeerTimelineHandler: ChannelInboundHandler, Sendable {
    typealias InboundIn = WebSocketFrame
    typealias InboundOut = WebSocketFrame
    let timeline: NIOLockedValueBox<[RawPeerEvent]>

    init(_ timeline: NIOLockedValueBox<[RawPeerEvent]>) {
        self.timeline = timeline
    }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        let frame = Self.unwrapInboundIn(data)
        self.timeline.withLockedValue { $0.append(RawPeerEvent(.received(frame.opcode))) }
        context.fireChannelRead(data)
    }
}

/// A self-signed certificate for `localhost` and 127.0.0.1 made with the openssl command at test time.
struct TestCertificate {
    let directory: URL
    var certificatePath: String { self.directory.appendingPathComponent("cert.pem").path }
    var keyPath: String { self.directory.appendingPathComponent("key.pem").path }

    static var isAvailable: Bool {
        FileManager.default.isExecutableFile(atPath: "/usr/bin/openssl")
    }

    /// A server's TLS settings presenting this certificate.
    var serverTLS: BLIPWebSocketServer.TLS {
        BLIPWebSocketServer.TLS(certificateChainPath: self.certificatePath, privateKeyPath: self.keyPath)
    }

    /// This certificate as the one a client presents (mutual TLS), from its files.
    var clientCertificate: BLIPWebSocketClient.TLS.ClientCertificate {
        .pemFiles(certificateChainPath: self.certificatePath, privateKeyPath: self.keyPath)
    }

    static func make(subjectAltName: String = "DNS:localhost,IP:127.0.0.1") throws -> TestCertificate {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent("blip-tls-\(UUID().uuidString)")
        try FileManager.default.createDirectory(at: directory, withIntermediateDirectories: true)
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/openssl")
        process.arguments = [
            "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
            "-keyout", directory.appendingPathComponent("key.pem").path,
            "-out", directory.appendingPathComponent("cert.pem").path,
            "-days", "2", "-subj", "/CN=localhost", "-addext", "subjectAltName=\(subjectAltName)",
        ]
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        process.waitUntilExit()
        guard process.terminationStatus == 0 else { throw BLIPConnectionError(.handshakeFailed, "openssl failed") }
        return TestCertificate(directory: directory)
    }

    func remove() {
        try? FileManager.default.removeItem(at: self.directory)
    }
}

/// Runs a server on a free loopback port for the duration of `body`.
func withServer<T: Sendable>(
    _ configuration: BLIPWebSocketServer.Configuration = BLIPWebSocketServer.Configuration.forTests,
    router: BLIPRouter = standardRouter(),
    eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
    upgradeHandler: BLIPWebSocketServer.UpgradeHandler? = nil,
    _ body: @Sendable (BLIPWebSocketServer) async throws -> T
) async throws -> T {
    StallWatchdog.started
    var configuration = configuration
    configuration.port = 0
    let server = try await BLIPWebSocketServer.bind(
        configuration: configuration,
        router: router,
        eventLoopGroup: eventLoopGroup,
        upgradeHandler: upgradeHandler
    )
    async let serving: Void = server.run()
    do {
        let result = try await body(server)
        await server.close()
        await serving
        return result
    } catch {
        await server.close()
        await serving
        throw error
    }
}

/// The standard test profiles of performance.md: echo, sink, error.
func standardRouter() -> BLIPRouter {
    var router = BLIPRouter()
    router.register(profile: "echo") { request, _ in
        BLIPResponse(properties: request.properties, body: request.body, compressed: request.isCompressed)
    }
    router.register(profile: "sink") { request, _ in
        BLIPResponse(properties: ["Count": "\(request.body.readableBytes)"], text: "\(request.body.readableBytes)")
    }
    router.register(profile: "error") { request, _ in
        throw BLIPError(
            domain: BLIPError.Domain(rawValue: request.properties["Want-Error-Domain"] ?? "HTTP"),
            code: BLIPError.Code(rawValue: Int32(request.properties["Want-Error-Code"] ?? "409") ?? 409),
            message: request.properties["Want-Error-Message"] ?? "conflict"
        )
    }
    return router
}

/// The first 4 MiB of every pattern, built once: bodies up to that size are slices of it (no copy), so
/// that tests making many bodies do not hold the cooperative pool's two threads while they copy.
private let patternSource = makePattern(4 << 20)

func pattern(_ count: Int) -> ByteBuffer {
    if count <= patternSource.readableBytes {
        return patternSource.getSlice(at: patternSource.readerIndex, length: count)!
    }
    return makePattern(count)
}

private func makePattern(_ count: Int) -> ByteBuffer {
    // Doubling copies (memcpy) rather than a byte at a time: a debug build takes seconds per 64 MiB the slow
    // way, on the two threads every suite's tasks share.
    var buffer = ByteBuffer(bytes: Array("abcdefghijklmnopqrstuvwxyz0123456789".utf8))
    buffer.reserveCapacity(count)
    while buffer.readableBytes < count {
        var copy = buffer.getSlice(
            at: buffer.readerIndex,
            length: min(buffer.readableBytes, count - buffer.readableBytes)
        )!
        buffer.writeBuffer(&copy)
    }
    return buffer.getSlice(at: buffer.readerIndex, length: count)!
}

/// A WebSocket server written by hand, for what NIO's server cannot do: it answers the upgrade request
/// with the 101 response and `frames` in a single write (so that they reach the client together), then
/// collects the client's frames (unmasked) until the client sends a close frame, and hangs up.
final class HandWrittenWebSocketServer: Sendable {
    let channel: any Channel
    let received: EventLoopPromise<[(opcode: UInt8, payload: [UInt8])]>

    init(frames: [UInt8]) async throws {
        let received = rawPeerEventLoops.any().makePromise(
            of: [(opcode: UInt8, payload: [UInt8])].self
        )
        self.received = received
        self.channel = try await ServerBootstrap(group: rawPeerEventLoops)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    try channel.pipeline.syncOperations.addHandler(Handler(frames: frames, received: received))
                }
            }
            .bind(host: "127.0.0.1", port: 0)
            .get()
    }

    var port: Int { self.channel.localAddress!.port! }

    func close() async {
        self.received.fail(BLIPConnectionError(.connectionClosed, "server closed"))
        try? await self.channel.close()
    }

    private final class Handler: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer

        let frames: [UInt8]
        let received: EventLoopPromise<[(opcode: UInt8, payload: [UInt8])]>
        var bytes: [UInt8] = []
        var answered = false
        var collected: [(opcode: UInt8, payload: [UInt8])] = []

        init(frames: [UInt8], received: EventLoopPromise<[(opcode: UInt8, payload: [UInt8])]>) {
            self.frames = frames
            self.received = received
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            self.bytes += Self.unwrapInboundIn(data).readableBytesView
            if !self.answered {
                guard let response = HandWrittenHandshake.response(consuming: &self.bytes) else { return }
                self.answered = true
                context.writeAndFlush(Self.wrapOutboundOut(ByteBuffer(bytes: Array(response.utf8) + self.frames)))
                    .whenComplete { _ in }
            }
            // Masked client frames with payloads under 126 bytes are all this needs to read.
            while self.bytes.count >= 6, self.bytes[1] & 0x7F < 126, self.bytes.count >= 6 + Int(self.bytes[1] & 0x7F) {
                let length = Int(self.bytes[1] & 0x7F)
                let key = Array(self.bytes[2..<6])
                let payload = (0..<length).map { self.bytes[6 + $0] ^ key[$0 % 4] }
                self.collected.append((self.bytes[0] & 0x0F, payload))
                self.bytes.removeFirst(6 + length)
                if self.collected.last?.opcode == 0x8 {
                    context.close(promise: nil)
                    return
                }
            }
        }

        func channelInactive(context: ChannelHandlerContext) {
            self.received.succeed(self.collected)
            context.fireChannelInactive()
        }
    }
}
