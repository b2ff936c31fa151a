import BLIP
import BLIPTestSupport
import BLIPWebSocket
import Foundation
import NIOCore
import NIOPosix
import Testing

/// A failed TLS handshake says why in plain words and names the endpoint, with the code `tlsFailed`.
/// Before, the message was NIOSSL's text: `handshakeFailed(NIOSSL.BoringSSLError.sslError([Error: 268435703
/// error:100000f7:SSL routines:OPENSSL_internal:WRONG_VERSION_NUMBER at <a path of the build machine>]))`.
@Suite(
    "TLS failures in plain words",
    .enabled(if: TestCertificate.isAvailable, "needs the openssl command"),
    .timeLimit(.minutes(3))
)
struct TLSFailureMessageTests {
    /// What connecting to `url` threw.
    static func failure(
        _ url: String,
        _ configuration: BLIPWebSocketClient.Configuration = BLIPWebSocketClient.Configuration()
    ) async -> BLIPConnectionError? {
        var configuration = configuration
        configuration.heartbeatInterval = nil
        return await #expect(throws: BLIPConnectionError.self) {
            try await BLIPWebSocketClient.connect(to: url, configuration: configuration) { _ in }
        }
    }

    @Test("wss:// to a plain ws:// server: the server did not answer in TLS")
    func plainServer() async throws {
        try await withServer { server in
            let error = await Self.failure("wss://127.0.0.1:\(server.port)/")
            #expect(error?.code == .tlsFailed, "\(String(describing: error))")
            #expect(
                error?.message
                    == "TLS with wss://127.0.0.1:\(server.port)/ failed: the server did not answer in TLS (is it a ws:// endpoint?)"
            )
        }
    }

    @Test("a server that closes during the TLS handshake: transportFailed (transient), in plain words")
    func closedDuringHandshake() async throws {
        let server = try await ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .childChannelInitializer { channel in
                channel.eventLoop.makeCompletedFuture { try channel.pipeline.syncOperations.addHandler(CloseOnRead()) }
            }
            .bind(host: "127.0.0.1", port: 0)
            .get()
        defer { server.close(promise: nil) }
        let url = "wss://127.0.0.1:\(server.localAddress!.port!)/"
        let error = await Self.failure(url)
        #expect(error?.code == .transportFailed, "\(String(describing: error))")
        #expect(error?.message == "the connection to \(url) closed: the server closed it during the TLS handshake")
        #expect(error?.isTransient == true)
    }

    @Test("a certificate no trusted root signed, then one for another name")
    func untrustedAndWrongName() async throws {
        let certificate = try await offThePool { try TestCertificate.make(subjectAltName: "DNS:sync.example.com") }
        defer { certificate.remove() }
        var configuration = BLIPWebSocketServer.Configuration.forTests
        configuration.tls = certificate.serverTLS
        try await withServer(configuration) { server in
            let url = "wss://localhost:\(server.port)/"
            let untrusted = await Self.failure(url)
            #expect(untrusted?.code == .tlsFailed)
            #expect(
                untrusted?.message
                    == "TLS with \(url) failed: the server's certificate is not trusted (no trusted root signed it, it has expired, or it does not match a pin)"
            )
            var trusting = BLIPWebSocketClient.Configuration()
            trusting.tls.trustRoots = .pemFile(certificate.certificatePath)
            let wrongName = await Self.failure(url, trusting)
            #expect(wrongName?.code == .tlsFailed)
            #expect(
                wrongName?.message == "TLS with \(url) failed: the server's certificate is not for this host name",
                "\(String(describing: wrongName))"
            )
        }
    }

    @Test("a server that requires a client certificate, from a client without one")
    func clientCertificateRequired() async throws {
        let (serverCertificate, clientCertificate) = try await offThePool {
            (try TestCertificate.make(), try TestCertificate.make())
        }
        defer {
            serverCertificate.remove()
            clientCertificate.remove()
        }
        var configuration = BLIPWebSocketServer.Configuration.forTests
        configuration.tls = serverCertificate.serverTLS
        configuration.tls?.clientCertificates = .required(trustRootsPath: clientCertificate.certificatePath)
        try await withServer(configuration) { server in
            var client = BLIPWebSocketClient.Configuration()
            client.tls.trustRoots = .pemFile(serverCertificate.certificatePath)
            let error = await Self.failure("wss://localhost:\(server.port)/", client)
            #expect(error?.code == .tlsFailed, "\(String(describing: error))")
            let message = error?.message ?? ""
            // TLS 1.3 reports the refusal with the first read after the handshake, TLS 1.2 in it: either
            // way the words say what the server wanted.
            #expect(
                message.hasSuffix("the server requires a client certificate")
                    || message.hasSuffix("the server did not accept the client certificate"),
                "\(message)"
            )
            #expect(!message.contains("OPENSSL_internal"), "\(message)")
        }
    }

    /// Reads the client's first bytes (its ClientHello), then closes: an orderly end of the TCP connection
    /// in the middle of the TLS handshake, not a reset.
    final class CloseOnRead: ChannelInboundHandler, Sendable {
        typealias InboundIn = ByteBuffer

        func channelRead(context: ChannelHandlerContext, data: NIOAny) {
            context.close(promise: nil)
        }
    }
}
