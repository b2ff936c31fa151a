import BLIP
import BLIPTestSupport
import BLIPWebSocket
import Foundation
import NIOCore
import NIOPosix
import Testing

/// Through microsocks, a real SOCKS5 proxy: without authentication and with a username and password
/// (RFC 1929, which NIOSOCKS lacks and ``BLIPProxy`` adds), ws and wss; each refusal a typed
/// ``BLIPProxyError`` within the timeouts.
@Suite(
    "SOCKS5 proxy (microsocks)",
    .enabled(if: MicroSocks.isAvailable, "needs microsocks (apt-get install microsocks; .ci/setup.sh installs it)"),
    .timeLimit(.minutes(3))
)
struct SOCKSProxyTests {
    static func configuration(proxy: String) throws -> BLIPWebSocketClient.Configuration {
        var configuration = BLIPWebSocketClient.Configuration()
        let parsed = try #require(BLIPProxy(url: proxy))
        configuration.proxy = parsed
        configuration.heartbeatInterval = nil
        configuration.handshakeTimeout = .seconds(20)
        return configuration
    }

    @Test("ws through the proxy, without authentication: request and reply, and a 1 MiB body each way")
    func webSocketThroughProxy() async throws {
        try await withServer { server in
            try await MicroSocks.with { proxy in
                let configuration = try Self.configuration(proxy: proxy.url())
                try await BLIPWebSocketClient.connect(
                    to: "ws://127.0.0.1:\(server.port)/db",
                    configuration: configuration
                ) {
                    connection in
                    let small = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "socks"))
                    #expect(small.body == ByteBuffer(string: "socks"))
                    let large = try await connection.sendRequest(BLIPRequest(profile: "echo", body: pattern(1 << 20)))
                    #expect(large.body == pattern(1 << 20))
                }
                // A name goes to the proxy, which resolves it.
                try await BLIPWebSocketClient.connect(
                    to: "ws://localhost:\(server.port)/",
                    configuration: configuration
                ) {
                    connection in
                    _ = try await connection.sendRequest(BLIPRequest(profile: "echo"))
                }
            }
        }
    }

    @Test(
        "wss through a proxy that wants a password: TLS end to end",
        .enabled(if: TestCertificate.isAvailable, "needs the openssl command")
    )
    func secureWebSocketWithPassword() async throws {
        let certificate = try await offThePool { try TestCertificate.make() }
        defer { certificate.remove() }
        var serverConfiguration = BLIPWebSocketServer.Configuration.forTests
        serverConfiguration.tls = certificate.serverTLS
        try await withServer(serverConfiguration) { server in
            try await MicroSocks.with(credentials: ("alice", "s3cret")) { proxy in
                var configuration = try Self.configuration(proxy: proxy.url(user: "alice", password: "s3cret"))
                configuration.tls.trustRoots = .pemFile(certificate.certificatePath)
                try await BLIPWebSocketClient.connect(
                    to: "wss://localhost:\(server.port)/",
                    configuration: configuration
                ) {
                    connection in
                    let reply = try await connection.sendRequest(BLIPRequest(profile: "echo", body: pattern(1 << 20)))
                    #expect(reply.body == pattern(1 << 20))
                }
            }
        }
    }

    @Test("a wrong password, or none, is authenticationRequired; the password is never shown")
    func authentication() async throws {
        try await withServer { server in
            try await MicroSocks.with(credentials: ("alice", "s3cret")) { proxy in
                for url in [proxy.url(user: "alice", password: "wrong"), proxy.url()] {
                    let configuration = try Self.configuration(proxy: url)
                    let error = await #expect(throws: BLIPProxyError.self) {
                        try await BLIPWebSocketClient.connect(
                            to: "ws://127.0.0.1:\(server.port)/",
                            configuration: configuration
                        ) { _ in }
                    }
                    #expect(error?.code == .authenticationRequired, "\(String(describing: error))")
                    #expect(error?.isTransient == false)
                    #expect(error.map { !"\($0)".contains("wrong") } == true)
                }
            }
        }
    }

    @Test("a server the proxy cannot connect to: refused, with the SOCKS reply, transient")
    func refusedTarget() async throws {
        try await withRefusingLoopbackPort { closedPort in
            try await MicroSocks.with { proxy in
                let configuration = try Self.configuration(proxy: proxy.url())
                let error = await #expect(throws: BLIPProxyError.self) {
                    try await BLIPWebSocketClient.connect(
                        to: "ws://127.0.0.1:\(closedPort)/",
                        configuration: configuration
                    ) { _ in }
                }
                #expect(error?.code == .refused)
                #expect(error?.socksReply == 5, "connection refused")
                #expect(error?.status == nil)
                #expect(error?.isTransient == true)
            }
        }
    }

    @Test("a server name longer than SOCKS5 carries fails before connecting (NIOSOCKS would trap)")
    func overlongHost() async throws {
        var configuration = BLIPWebSocketClient.Configuration()
        configuration.proxy = .socks5(host: "127.0.0.1", port: 9)
        let host = String(repeating: "a", count: 250) + ".example"
        let error = await #expect(throws: BLIPProxyError.self) {
            try await BLIPWebSocketClient.connect(to: "ws://\(host)/", configuration: configuration) { _ in }
        }
        #expect(error?.code == .invalidResponse)
    }

    @Test("a username or password longer than RFC 1929 allows fails before connecting")
    func overlongCredentials() async throws {
        var configuration = BLIPWebSocketClient.Configuration()
        configuration.proxy = .socks5(
            host: "127.0.0.1",
            port: 9,
            username: "alice",
            password: String(repeating: "x", count: 256)
        )
        let error = await #expect(throws: BLIPProxyError.self) {
            try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:9/", configuration: configuration) { _ in }
        }
        #expect(error?.code == .authenticationRequired)
    }
}

/// The ways only a SOCKS5 proxy can fail, from fake proxies (the ones every proxy shares are in
/// ``HTTPProxyFailureTests``).
@Suite("SOCKS5 proxy failures", .timeLimit(.minutes(2)))
struct SOCKSProxyFailureTests {
    static func connect(proxyPort: Int) async throws {
        try await HTTPProxyFailureTests.connect(proxyPort: proxyPort, kind: .socks5)
    }

    @Test("the proxy hangs up after the password: closed")
    func closesAfterPassword() async throws {
        // Picks the password method, then hangs up on the credentials.
        let script: @Sendable (any Channel) -> Void = {
            _ = $0.pipeline.addHandler(ScriptedSOCKSProxy(answers: [[5, 2]]))
        }
        try await HTTPProxyFailureTests.withFakeProxy(script) { port in
            let error = await #expect(throws: BLIPProxyError.self) { try await Self.connect(proxyPort: port) }
            #expect(error?.code == .closed)
        }
    }

    @Test("an answer that is not SOCKS5: invalid response")
    func notSOCKS() async throws {
        let script: @Sendable (any Channel) -> Void = {
            _ = $0.pipeline.addHandler(ScriptedSOCKSProxy(answers: [Array("HTTP/1.1 400 Bad Request\r\n\r\n".utf8)]))
        }
        try await HTTPProxyFailureTests.withFakeProxy(script) { port in
            let error = await #expect(throws: BLIPProxyError.self) { try await Self.connect(proxyPort: port) }
            #expect(error?.code == .invalidResponse)
        }
    }

    @Test("the proxy accepts no offered method: authenticationRequired")
    func noAcceptableMethod() async throws {
        let script: @Sendable (any Channel) -> Void = {
            _ = $0.pipeline.addHandler(ScriptedSOCKSProxy(answers: [[5, 0xFF]]))
        }
        try await HTTPProxyFailureTests.withFakeProxy(script) { port in
            let error = await #expect(throws: BLIPProxyError.self) { try await Self.connect(proxyPort: port) }
            #expect(error?.code == .authenticationRequired)
        }
    }
}

/// Answers each read with the next of `answers`, and hangs up when they run out.
private final class ScriptedSOCKSProxy: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = ByteBuffer
    typealias OutboundOut = ByteBuffer

    private var answers: [[UInt8]]

    init(answers: [[UInt8]]) { self.answers = answers }

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        guard !self.answers.isEmpty else {
            context.close(promise: nil)
            return
        }
        let answer = self.answers.removeFirst()
        context.writeAndFlush(Self.wrapOutboundOut(ByteBuffer(bytes: answer)), promise: nil)
    }
}
