internal import BLIP
package import BLIPWebSocket
package import BLIPWire
package import Foundation
internal import NIOConcurrencyHelpers
package import NIOCore
internal import NIOPosix
internal import NIOSSL

/// A WebSocket proxy that shows the BLIP traffic passing through it (`blip proxy`).
///
/// Each client's handshake is sent on to the upstream as the client wrote it (only `Host`, and the path
/// when the upstream URL has one, are the upstream's), and the upstream's answer comes back as it wrote
/// it, a refusal included. From then on the bytes are relayed unchanged in both directions: frames,
/// masks, pings, pongs and closes are the peers' own, and TCP flow control reaches from one peer to
/// the other. Beside the relay, each direction is decoded in the dialect the upstream chose and every
/// completed message is reported to the observer; a direction that cannot be decoded is reported once
/// and then only relayed.
package final class BLIPInspectingProxy: Sendable {
    package struct Configuration: Sendable {
        package var host = "127.0.0.1"
        package var port = 4984
        /// Where clients are relayed to: `ws://` or `wss://`, with an optional path prefix.
        package var upstream: BLIPWebSocketURL
        /// How the upstream's certificate is checked, and the certificate presented to it.
        package var upstreamTLS = BLIPWebSocketClient.TLS()
        /// Terminates TLS for clients (wss:// to the proxy).
        package var tls: BLIPWebSocketServer.TLS?
        /// Decode BLIP beside the relay (off: relay and report handshakes, controls and closes only).
        package var decodes = true
        /// Writes each upgraded connection's frames and handshake in the Fixtures format, one folder each.
        package var captureDirectory: String?
        /// Header fields shown as `(redacted)` in reports and captured handshakes (never in the relay).
        package var redactedHeaders: Set<String> = []
        /// The dialect of an upgrade answered without a subprotocol (the seed dialect's way).
        package var dialectWithoutSubprotocol: BLIPDialect? = .seed
        /// The largest WebSocket message decoded; a larger one stops the decoding of its direction.
        package var maximumMessageSize = 16 << 20
        /// Message bodies up to this size get a SHA-256 in reports; larger ones only their size (hashing is
        /// what following bulk traffic costs most).
        package var maximumDigestedBodySize = 1 << 20
        /// The largest request or response head read.
        package var maximumHeadSize = 16 * 1024
        package var connectTimeout = Duration.seconds(10)

        /// The fields that carry credentials, for ``redactedHeaders``.
        package static let credentialHeaders: Set<String> = [
            "Authorization", "Proxy-Authorization", "Cookie", "Set-Cookie",
        ]

        package init(upstream: BLIPWebSocketURL) {
            self.upstream = upstream
        }
    }

    /// Which way a reported frame or message travelled.
    package enum Direction: String, Sendable {
        case clientToServer = "c2s"
        case serverToClient = "s2c"
    }

    /// Something the proxy saw, on the connection numbered `connection` (from 1, in accept order).
    package struct Event: Sendable {
        package var connection: Int
        package var time: Date
        package var kind: Kind

        package init(connection: Int, time: Date, kind: Kind) {
            self.connection = connection
            self.time = time
            self.kind = kind
        }

        package enum Kind: Sendable {
            case accepted(remoteAddress: String)
            /// The upstream answered the client's request (with a 101 or a refusal); `dialect` is what the
            /// connection is decoded as, nil when it is not (a refusal, an unknown subprotocol).
            case handshake(request: RelayedHTTPHead, response: RelayedHTTPHead, dialect: BLIPDialect?)
            /// The upstream could not be reached, or failed before it answered (its TLS handshake); the
            /// client got a 502.
            case upstreamUnreachable(String)
            /// A message's last frame passed; `duration` is the time since its first frame passed.
            case message(Direction, BLIPTrafficDecoder.Message, duration: Duration)
            case ack(Direction, BLIPFrameHeader, byteCount: UInt64)
            case control(Direction, Control)
            /// This direction is no longer decoded (a bad frame, a checksum mismatch, an inflate failure,
            /// a message over budget); its bytes are still relayed unchanged.
            case decodingStopped(Direction, String)
            /// Both sockets closed. `incomplete` names the messages whose last frame never came.
            case closed(bytesFromClient: Int, bytesFromServer: Int, incomplete: [String])
        }

        package enum Control: Sendable {
            case ping(ByteBuffer)
            case pong(ByteBuffer)
            case close(code: UInt16?, reason: String)
            /// A text message, which BLIP never sends.
            case text(ByteBuffer)
        }
    }

    package let configuration: Configuration
    private let channel: any Channel
    private let connections: ProxiedConnections

    private init(configuration: Configuration, channel: any Channel, connections: ProxiedConnections) {
        self.configuration = configuration
        self.channel = channel
        self.connections = connections
    }

    /// The port the proxy listens on (the one picked, when the configuration asked for 0).
    package var port: Int { self.channel.localAddress?.port ?? self.configuration.port }

    /// Connections open now.
    package var openConnectionCount: Int { self.connections.count }

    /// Starts listening. `observer` is called on the connections' event loops, in order per connection:
    /// keep it short (queue the work elsewhere), since the connection's next read batch waits for it (each
    /// batch is relayed and flushed before it is inspected).
    package static func start(
        configuration: Configuration,
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        observer: @escaping @Sendable (Event) -> Void
    ) async throws -> BLIPInspectingProxy {
        let serverTLS = try configuration.tls.map { try BLIPWebSocketServer.makeTLSContext($0) }
        let upstreamTLS =
            configuration.upstream.isSecure ? try BLIPWebSocketClient.makeTLSContext(configuration.upstreamTLS) : nil
        let connections = ProxiedConnections()
        let captureCounter = CaptureCounter()
        let counter = NIOLockedValueBox(0)
        let channel = try await ServerBootstrap(group: eventLoopGroup)
            .serverChannelOption(.backlog, value: 256)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelOption(.tcpOption(.tcp_nodelay), value: 1)
            .childChannelInitializer { channel in
                let id = counter.withLockedValue {
                    $0 += 1
                    return $0
                }
                let inspector = ConnectionInspector(
                    id: id,
                    configuration: configuration,
                    captureCounter: captureCounter,
                    report: observer
                )
                inspector.emit(.accepted(remoteAddress: channel.remoteAddress.map { "\($0)" } ?? "unknown"))
                let relay = ProxiedConnection(
                    inspector: inspector,
                    upstream: configuration.upstream,
                    upstreamTLS: upstreamTLS.map { ($0, configuration.upstreamTLS) },
                    configuration: configuration,
                    connections: connections
                )
                connections.add(channel)
                do {
                    let sync = channel.pipeline.syncOperations
                    if let serverTLS { try sync.addHandler(NIOSSLServerHandler(context: serverTLS)) }
                    try sync.addHandler(relay.clientHandler)
                    return channel.eventLoop.makeSucceededVoidFuture()
                } catch {
                    return channel.eventLoop.makeFailedFuture(error)
                }
            }
            .bind(host: configuration.host, port: configuration.port)
            .get()
        return BLIPInspectingProxy(configuration: configuration, channel: channel, connections: connections)
    }

    /// Stops listening and closes every relayed connection (both sockets) at once; returns when they are
    /// closed and their last events reported.
    package func close() async {
        try? await self.channel.close()
        let channels = self.connections.all
        for channel in channels { channel.close(promise: nil) }
        for channel in channels { try? await channel.closeFuture.get() }
    }
}

/// The channels of the connections being relayed, both sides, for shutdown.
final class ProxiedConnections: Sendable {
    private let channels = NIOLockedValueBox([ObjectIdentifier: (channel: any Channel, isClient: Bool)]())

    func add(_ channel: any Channel, isClient: Bool = true) {
        let key = ObjectIdentifier(channel)
        self.channels.withLockedValue { $0[key] = (channel, isClient) }
        channel.closeFuture.whenComplete { _ in
            _ = self.channels.withLockedValue { $0.removeValue(forKey: key) }
        }
    }

    var all: [any Channel] { self.channels.withLockedValue { $0.values.map(\.channel) } }
    /// Client connections open.
    var count: Int { self.channels.withLockedValue { $0.values.filter(\.isClient).count } }
}
