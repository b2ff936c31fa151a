import BLIP
import BLIPTestSupport
import BLIPWebSocket
import Foundation
import NIOCore
import NIOPosix
import Testing

@Suite("Proxy settings")
struct ProxySettingsTests {
    @Test("an http:// proxy URL: credentials percent-decoded, port 1080 by default, never shown")
    func parsesURL() throws {
        let proxy = try #require(BLIPProxy(url: "http://al%40ice:p%3Ass@proxy.example:3128"))
        #expect(proxy.host == "proxy.example" && proxy.port == 3128)
        #expect(proxy.username == "al@ice" && proxy.password == "p:ss")
        #expect(proxy.description == "http://proxy.example:3128")
        #expect(BLIPProxy(url: "http://[::1]")?.host == "::1")
        #expect(BLIPProxy(url: "http://[::1]")?.port == 1080)
        #expect(BLIPProxy(url: "http://[::1]")?.description == "http://[::1]:1080")
        #expect(BLIPProxy(url: "ftp://proxy.example") == nil)
        #expect(BLIPProxy(url: "proxy.example:3128") == nil)
    }
}

/// Through tinyproxy, a real HTTP proxy: the tunnel carries ws and wss (TLS end to end), and each way the
/// proxy can refuse is a typed ``BLIPProxyError`` within the timeouts.
@Suite(
    "HTTP CONNECT proxy (tinyproxy)",
    .enabled(if: TinyProxy.isAvailable, "needs tinyproxy (apt-get install tinyproxy; .ci/setup.sh installs it)"),
    .timeLimit(.minutes(3))
)
struct HTTPProxyTests {
    static func configuration(proxy: String) throws -> BLIPWebSocketClient.Configuration {
        var configuration = BLIPWebSocketClient.Configuration()
        let parsed = try #require(BLIPProxy(url: proxy))
        configuration.proxy = parsed
        configuration.heartbeatInterval = nil
        configuration.handshakeTimeout = .seconds(20)
        return configuration
    }

    @Test("ws through the tunnel: request and reply, and a 1 MiB body each way")
    func webSocketThroughProxy() async throws {
        try await withServer { server in
            try await TinyProxy.with(connectPorts: [server.port]) { proxy in
                let configuration = try Self.configuration(proxy: proxy.url())
                let target = "ws://127.0.0.1:\(server.port)/db"
                try await BLIPWebSocketClient.connect(to: target, configuration: configuration) { connection in
                    let small = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "through"))
                    #expect(small.body == ByteBuffer(string: "through"))
                    let large = try await connection.sendRequest(BLIPRequest(profile: "echo", body: pattern(1 << 20)))
                    #expect(large.body == pattern(1 << 20))
                }
                #expect(proxy.tunnelsOpened == 1)
            }
        }
    }

    @Test(
        "wss through the tunnel: TLS end to end with the server's own certificate",
        .enabled(if: TestCertificate.isAvailable, "needs the openssl command")
    )
    func secureWebSocketThroughProxy() async throws {
        let certificate = try await offThePool { try TestCertificate.make() }
        defer { certificate.remove() }
        var serverConfiguration = BLIPWebSocketServer.Configuration.forTests
        serverConfiguration.tls = certificate.serverTLS
        try await withServer(serverConfiguration) { server in
            try await TinyProxy.with(connectPorts: [server.port]) { proxy in
                var configuration = try Self.configuration(proxy: proxy.url())
                configuration.tls.trustRoots = .pemFile(certificate.certificatePath)
                let target = "wss://localhost:\(server.port)/"
                try await BLIPWebSocketClient.connect(to: target, configuration: configuration) { connection in
                    let reply = try await connection.sendRequest(BLIPRequest(profile: "echo", body: pattern(1 << 20)))
                    #expect(reply.body == pattern(1 << 20))
                }
                #expect(proxy.tunnelsOpened == 1)
            }
        }
    }

    @Test("credentials: the right ones pass; wrong or none is a 407 with the proxy's Basic challenge")
    func proxyAuthentication() async throws {
        try await withServer { server in
            try await TinyProxy.with(credentials: ("alice", "secret"), connectPorts: [server.port]) { proxy in
                let target = "ws://127.0.0.1:\(server.port)/"
                let right = try Self.configuration(proxy: proxy.url(user: "alice", password: "secret"))
                try await BLIPWebSocketClient.connect(to: target, configuration: right) { connection in
                    _ = try await connection.sendRequest(BLIPRequest(profile: "echo"))
                }
                // tinyproxy answers 407 without credentials and 401 (with WWW-Authenticate) to wrong ones.
                for (url, status) in [(proxy.url(user: "alice", password: "wrong"), 401), (proxy.url(), 407)] {
                    let configuration = try Self.configuration(proxy: url)
                    let error = await #expect(throws: BLIPProxyError.self) {
                        try await BLIPWebSocketClient.connect(to: target, configuration: configuration) { _ in }
                    }
                    #expect(error?.code == .authenticationRequired)
                    #expect(error?.status == status)
                    #expect(error?.challenges.first?.hasScheme("Basic") == true, "\(String(describing: error))")
                    #expect(error?.isTransient == false)
                    #expect(error.map { !"\($0)".contains("wrong") } == true, "the password is not shown")
                }
            }
        }
    }

    @Test("a target the proxy may not reach is a 403 refusal")
    func refusedTarget() async throws {
        try await withServer { server in
            try await TinyProxy.with(connectPorts: [server.port + 1]) { proxy in
                let configuration = try Self.configuration(proxy: proxy.url())
                let error = await #expect(throws: BLIPProxyError.self) {
                    try await BLIPWebSocketClient.connect(
                        to: "ws://127.0.0.1:\(server.port)/",
                        configuration: configuration
                    ) {
                        _ in
                    }
                }
                #expect(error?.code == .refused)
                #expect(error?.status == 403)
            }
        }
    }
}

/// The ways a proxy can fail that need no real proxy: nothing listening, one that hangs up, one that never
/// answers (HTTP and SOCKS5 alike), one that does not speak HTTP.
@Suite("Proxy failures", .timeLimit(.minutes(2)))
struct HTTPProxyFailureTests {
    /// Each kind of proxy at a loopback port, SOCKS5 with credentials (its longest handshake).
    enum Kind: String, CaseIterable, Sendable {
        case http, socks5

        func proxy(port: Int) -> BLIPProxy {
            switch self {
            case .http: .http(host: "127.0.0.1", port: port)
            case .socks5: .socks5(host: "127.0.0.1", port: port, username: "alice", password: "secret")
            }
        }
    }

    /// A TCP server on a loopback port whose connections get `behaviour`.
    static func withFakeProxy<T: Sendable>(
        _ behaviour: @escaping @Sendable (any Channel) -> Void,
        _ body: (Int) async throws -> T
    ) async throws -> T {
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { channel in
                behaviour(channel)
                return channel.eventLoop.makeSucceededVoidFuture()
            }
            .bind(host: "127.0.0.1", port: 0).get()
        do {
            let result = try await body(server.localAddress!.port!)
            try await server.close()
            return result
        } catch {
            try? await server.close()
            throw error
        }
    }

    static func connect(
        proxyPort: Int,
        kind: Kind = .http,
        handshakeTimeout: Duration = .seconds(20)
    ) async throws {
        var configuration = BLIPWebSocketClient.Configuration()
        configuration.proxy = kind.proxy(port: proxyPort)
        configuration.handshakeTimeout = handshakeTimeout
        configuration.heartbeatInterval = nil
        try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:9/", configuration: configuration) { _ in }
    }

    @Test("nothing listens at the proxy's address: unreachable", arguments: Kind.allCases)
    func unreachable(kind: Kind) async throws {
        try await withRefusingLoopbackPort { port in
            let error = await #expect(throws: BLIPProxyError.self) {
                try await Self.connect(proxyPort: port, kind: kind)
            }
            #expect(error?.code == .unreachable)
            #expect(error?.isTransient == true)
            #expect(error?.description.hasPrefix("BLIPProxyError(unreachable from proxy \(kind)://127.0.0.1:") == true)
        }
    }

    @Test("the proxy hangs up before answering: closed", arguments: Kind.allCases)
    func closesMidHandshake(kind: Kind) async throws {
        // Hangs up once the CONNECT request (or the SOCKS5 greeting) has arrived.
        let hangUp: @Sendable (any Channel) -> Void = { _ = $0.pipeline.addHandler(CloseOnRead()) }
        try await Self.withFakeProxy(hangUp) { port in
            let error = await #expect(throws: BLIPProxyError.self) {
                // A handshake timeout well past what a loaded machine takes: the outcome looked at is the
                // hang-up, which a 20 s bound turned into timedOut once beside stress-ng.
                try await Self.connect(proxyPort: port, kind: kind, handshakeTimeout: .seconds(90))
            }
            #expect(error?.code == .closed)
        }
    }

    @Test("the proxy never answers: timed out within the handshake timeout", arguments: Kind.allCases)
    func neverAnswers(kind: Kind) async throws {
        let silent: @Sendable (any Channel) -> Void = { _ in }
        try await Self.withFakeProxy(silent) { port in
            let started = ContinuousClock.now
            let error = await #expect(throws: BLIPProxyError.self) {
                try await Self.connect(proxyPort: port, kind: kind, handshakeTimeout: .milliseconds(500))
            }
            #expect(error?.code == .timedOut)
            #expect(ContinuousClock.now - started < .seconds(30))
        }
    }

    @Test("an answer that is not HTTP: invalid response")
    func notHTTP() async throws {
        let greetsInSSH: @Sendable (any Channel) -> Void = {
            _ = $0.writeAndFlush(ByteBuffer(string: "SSH-2.0-OpenSSH_9.2\r\n\r\n"))
        }
        try await Self.withFakeProxy(greetsInSSH) { port in
            let error = await #expect(throws: BLIPProxyError.self) { try await Self.connect(proxyPort: port) }
            #expect(error?.code == .invalidResponse)
        }
    }
}

final class CloseOnRead: ChannelInboundHandler, Sendable {
    typealias InboundIn = ByteBuffer

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        context.close(promise: nil)
    }
}
