import BLIPWebSocket
import Crypto
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization

/// A loopback HTTP server that answers each request with whatever the test scripted for it, and records
/// every request it saw: to play the refusing, redirecting or broken servers a client meets.
final class CannedHTTPServer: Sendable {
    struct Request: Sendable {
        var target: String
        var headers: HTTPFields
    }

    enum Response: Sendable {
        /// A whole response with a `Content-Length`; the server closes the connection after it.
        case status(Int, String, headers: [String] = [], body: String = "")
        /// A status line and headers without length, then a body that does not end: `x` until the client
        /// hangs up, or ``CannedHTTPServer/endlessLimit`` bytes.
        case endless(Int, String)
        /// A valid 101 (the right `Sec-WebSocket-Accept`) with these header lines, then silence.
        case upgrade(subprotocol: String?, headers: [String] = [])
        /// A 101 with a wrong `Sec-WebSocket-Accept`.
        case upgradeWithBadAccept(subprotocol: String?)
    }

    /// Where an endless body stops if the client never hangs up (the test then fails on its size).
    static let endlessLimit = 256 << 20

    let channel: any Channel
    private let log = Log()

    /// What the connections share: the requests seen and the endless body bytes written.
    private final class Log: Sendable {
        let requests = NIOLockedValueBox<[Request]>([])
        let endlessBytesWritten = Atomic<Int>(0)
    }

    init(
        group: any EventLoopGroup,
        tls: NIOSSLContext? = nil,
        respond: @escaping @Sendable (Request) -> Response
    ) async throws {
        let log = self.log
        self.channel = try await ServerBootstrap(group: group)
            .serverChannelOption(.socketOption(.so_reuseaddr), value: 1)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture {
                    if let tls { try channel.pipeline.syncOperations.addHandler(NIOSSLServerHandler(context: tls)) }
                    try channel.pipeline.syncOperations.addHandler(
                        Handler(
                            respond: respond,
                            record: { request in log.requests.withLockedValue { $0.append(request) } }
                        ) {
                            log.endlessBytesWritten.add($0, ordering: .relaxed)
                        }
                    )
                }
            }
            .bind(host: "127.0.0.1", port: 0)
            .get()
    }

    var port: Int { self.channel.localAddress!.port! }
    /// `ws://127.0.0.1:<port>` followed by `path`.
    func url(_ path: String = "/") -> String { "ws://127.0.0.1:\(self.port)\(path)" }
    var requests: [Request] { self.log.requests.withLockedValue { $0 } }
    /// Body bytes the server managed to write for endless responses, all connections together.
    var endlessBytesWritten: Int { self.log.endlessBytesWritten.load(ordering: .relaxed) }

    func close() async {
        try? await self.channel.close()
    }

    private final class Handler: ChannelInboundHandler {
        typealias InboundIn = ByteBuffer
        typealias OutboundOut = ByteBuffer

        let respond: @Sendable (Request) -> Response
        let record: @Sendable (Request) -> Void
        let countEndless: @Sendable (Int) -> Void
        var bytes: [UInt8] = []
        var answered = false

        init(
            respond: @escaping @Sendable (Request) -> Response,
            record: @escaping @Sendable (Request) -> Void,
            countEndless: @escaping @Sendable (Int) -> Void
        ) {
            self.respond = respond
            self.record = record
            self.countEndless = countEndless
        }

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            guard !self.answered else { return }
            self.bytes += Self.unwrapInboundIn(data).readableBytesView
            guard let end = self.bytes.firstRange(of: Array("\r\n\r\n".utf8)) else { return }
            self.answered = true
            let lines = String(decoding: self.bytes[..<end.lowerBound], as: UTF8.self).components(separatedBy: "\r\n")
            var headers = HTTPFields()
            for line in lines.dropFirst() {
                guard let colon = line.firstIndex(of: ":") else { continue }
                headers.add(
                    name: String(line[..<colon]),
                    value: line[line.index(after: colon)...].trimmingCharacters(in: .whitespaces)
                )
            }
            let target = lines[0].split(separator: " ").dropFirst().first.map(String.init) ?? ""
            let request = Request(target: target, headers: headers)
            self.record(request)
            let channel = context.channel
            switch self.respond(request) {
            case .status(let code, let reason, let extra, let body):
                let head = Self.head(code, reason, extra + ["Content-Length: \(body.utf8.count)", "Connection: close"])
                channel.writeAndFlush(ByteBuffer(string: head + body)).whenComplete { _ in channel.close(promise: nil) }
            case .endless(let code, let reason):
                channel.writeAndFlush(ByteBuffer(string: Self.head(code, reason, ["Content-Type: text/plain"])))
                    .whenComplete { _ in }
                Self.writeEndlessly(channel, written: 0, count: self.countEndless)
            case .upgrade(let subprotocol, let extra):
                let accept = Self.accept(for: headers.first("Sec-WebSocket-Key") ?? "")
                channel.writeAndFlush(ByteBuffer(string: Self.switching(accept, subprotocol, extra))).whenComplete {
                    _ in
                }
            case .upgradeWithBadAccept(let subprotocol):
                let accept = Self.accept(for: "not the client's key")
                channel.writeAndFlush(ByteBuffer(string: Self.switching(accept, subprotocol, []))).whenComplete { _ in }
            }
        }

        /// Writes 16 KiB after 16 KiB, each once the last has left, until a write fails or the limit.
        static func writeEndlessly(_ channel: any Channel, written: Int, count: @escaping @Sendable (Int) -> Void) {
            guard written < CannedHTTPServer.endlessLimit else {
                channel.close(promise: nil)
                return
            }
            let chunk = ByteBuffer(repeating: UInt8(ascii: "x"), count: 16 << 10)
            channel.writeAndFlush(chunk).whenComplete { result in
                guard case .success = result else { return }
                count(chunk.readableBytes)
                Self.writeEndlessly(channel, written: written + chunk.readableBytes, count: count)
            }
        }

        static func head(_ code: Int, _ reason: String, _ headers: [String]) -> String {
            "HTTP/1.1 \(code) \(reason)\r\n" + headers.map { $0 + "\r\n" }.joined() + "\r\n"
        }

        static func switching(_ accept: String, _ subprotocol: String?, _ extra: [String]) -> String {
            var headers = ["Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Accept: \(accept)"]
            if let subprotocol { headers.append("Sec-WebSocket-Protocol: \(subprotocol)") }
            return Self.head(101, "Switching Protocols", headers + extra)
        }

        static func accept(for key: String) -> String {
            Data(Insecure.SHA1.hash(data: Data((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").utf8)))
                .base64EncodedString()
        }
    }
}
