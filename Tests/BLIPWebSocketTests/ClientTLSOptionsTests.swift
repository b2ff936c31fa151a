import BLIP
import BLIPTestSupport
import BLIPWebSocket
import Crypto
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOSSL
import Testing

/// The client's trust options beyond trust roots and a leaf pin: pins anywhere in the chain, the server
/// name, NIOSSL's full configuration underneath, and a verification callback of the caller's own.
@Suite(
    "Client TLS options",
    .enabled(if: TestCertificate.isAvailable, "needs the openssl command"),
    .timeLimit(.minutes(3))
)
struct ClientTLSOptionsTests {
    static func sha256(ofPEMFile path: String) throws -> [UInt8] {
        Array(SHA256.hash(data: try NIOSSLCertificate.fromPEMFile(path)[0].toDERBytes()))
    }

    /// Connects and sends one request, or throws what the connection threw.
    static func exchange(_ url: String, _ configuration: BLIPWebSocketClient.Configuration) async throws {
        var configuration = configuration
        configuration.heartbeatInterval = nil
        try await BLIPWebSocketClient.connect(to: url, configuration: configuration) { connection in
            _ = try await connection.sendRequest(BLIPRequest(profile: "echo"))
        }
    }

    static func expectTLSFailure(_ url: String, _ configuration: BLIPWebSocketClient.Configuration) async {
        let error = await #expect(throws: BLIPConnectionError.self) { try await Self.exchange(url, configuration) }
        #expect(error?.code == .tlsFailed, "\(String(describing: error))")
    }

    static func withTLSServer(
        chain: String,
        key: String,
        _ body: @Sendable (Int) async throws -> Void
    ) async throws {
        var configuration = BLIPWebSocketServer.Configuration.forTests
        configuration.tls = BLIPWebSocketServer.TLS(certificateChainPath: chain, privateKeyPath: key)
        try await withServer(configuration) { server in try await body(server.port) }
    }

    @Test("a pinned CA: the chain up to it verifies, name included; another pin or name fails")
    func chainPin() async throws {
        let chain = try await offThePool { try TestCertificateChain.make() }
        defer { chain.remove() }
        let caPin = try Self.sha256(ofPEMFile: chain.caPath)
        try await Self.withTLSServer(chain: chain.certificatePath, key: chain.keyPath) { port in
            var pinned = BLIPWebSocketClient.Configuration()
            pinned.tls.pinnedChainSHA256 = [[UInt8](repeating: 7, count: 32), caPin]  // a backup pin first
            try await Self.exchange("wss://localhost:\(port)/", pinned)
            try await Self.exchange("wss://127.0.0.1:\(port)/", pinned)
            // Without the pin the system roots do not know the test CA.
            await Self.expectTLSFailure("wss://localhost:\(port)/", BLIPWebSocketClient.Configuration())
            var otherName = pinned
            otherName.tls.serverName = "sync.example.com"
            await Self.expectTLSFailure("wss://localhost:\(port)/", otherName)
            var otherPin = BLIPWebSocketClient.Configuration()
            otherPin.tls.pinnedChainSHA256 = [[UInt8](repeating: 7, count: 32)]
            await Self.expectTLSFailure("wss://localhost:\(port)/", otherPin)
            // The leaf pinned as a chain pin: itself the anchor.
            var leafAsAnchor = BLIPWebSocketClient.Configuration()
            leafAsAnchor.tls.pinnedChainSHA256 = [try Self.sha256(ofPEMFile: chain.certificatePath)]
            try await Self.exchange("wss://localhost:\(port)/", leafAsAnchor)
        }
    }

    @Test("a chain that only carries a copy of the pinned CA, under a leaf it did not sign, fails")
    func forgedChain() async throws {
        let (chain, impostor) = try await offThePool { (try TestCertificateChain.make(), try TestCertificate.make()) }
        defer {
            chain.remove()
            impostor.remove()
        }
        let forged = impostor.directory.appendingPathComponent("forged.pem").path
        try
            (String(contentsOfFile: impostor.certificatePath, encoding: .utf8)
            + String(contentsOfFile: chain.caPath, encoding: .utf8))
            .write(toFile: forged, atomically: true, encoding: .utf8)
        try await Self.withTLSServer(chain: forged, key: impostor.keyPath) { port in
            var pinned = BLIPWebSocketClient.Configuration()
            pinned.tls.pinnedChainSHA256 = [try Self.sha256(ofPEMFile: chain.caPath)]
            await Self.expectTLSFailure("wss://localhost:\(port)/", pinned)
        }
    }

    @Test("serverName: checked instead of the URL's host")
    func serverName() async throws {
        // For a name only: NIOSSL also accepts a certificate for the address it connected to.
        let certificate = try await offThePool { try TestCertificate.make(subjectAltName: "DNS:sync.example.com") }
        defer { certificate.remove() }
        try await Self.withTLSServer(chain: certificate.certificatePath, key: certificate.keyPath) { port in
            var configuration = BLIPWebSocketClient.Configuration()
            configuration.tls.trustRoots = .pemFile(certificate.certificatePath)
            await Self.expectTLSFailure("wss://127.0.0.1:\(port)/", configuration)
            await Self.expectTLSFailure("wss://localhost:\(port)/", configuration)
            configuration.tls.serverName = "sync.example.com"
            try await Self.exchange("wss://127.0.0.1:\(port)/", configuration)
            try await Self.exchange("wss://localhost:\(port)/", configuration)
            configuration.tls.serverName = "other.example.com"
            await Self.expectTLSFailure("wss://localhost:\(port)/", configuration)
        }
    }

    @Test("NIOSSL's configuration underneath: its settings apply, and the simple options set go on top")
    func configurationPassthrough() async throws {
        let (certificate, other) = try await offThePool { (try TestCertificate.make(), try TestCertificate.make()) }
        defer {
            certificate.remove()
            other.remove()
        }
        try await Self.withTLSServer(chain: certificate.certificatePath, key: certificate.keyPath) { port in
            let url = "wss://localhost:\(port)/"
            let secrets = NIOLockedValueBox(0)
            var base = TLSConfiguration.makeClientConfiguration()
            base.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(certificate.certificatePath))
            base.minimumTLSVersion = .tlsv12
            base.keyLogCallback = { _ in secrets.withLockedValue { $0 += 1 } }
            var configuration = BLIPWebSocketClient.Configuration()
            configuration.tls.configuration = base
            try await Self.exchange(url, configuration)
            #expect(secrets.withLockedValue { $0 } > 0, "the key log callback of the base configuration ran")
            // A trust root set in the simple options replaces the base's.
            configuration.tls.trustRoots = .pemFile(other.certificatePath)
            await Self.expectTLSFailure(url, configuration)
            // A base offering only an RSA cipher suite of TLS 1.2 to a server with an EC key: no handshake.
            var rsaOnly = BLIPWebSocketClient.Configuration()
            rsaOnly.tls.configuration = base
            rsaOnly.tls.configuration?.maximumTLSVersion = .tlsv12
            rsaOnly.tls.configuration?.cipherSuiteValues = [.TLS_RSA_WITH_AES_128_GCM_SHA256]
            await Self.expectTLSFailure(url, rsaOnly)
            // A base that turns verification off does not turn off a pin.
            var pinnedAnyway = BLIPWebSocketClient.Configuration()
            pinnedAnyway.tls.configuration = base
            pinnedAnyway.tls.configuration?.certificateVerification = .none
            pinnedAnyway.tls.pinnedCertificateSHA256 = [UInt8](repeating: 1, count: 32)
            await Self.expectTLSFailure(url, pinnedAnyway)
        }
    }

    @Test("a verification callback of the caller's own decides, with the chain as presented")
    func customVerification() async throws {
        let chain = try await offThePool { try TestCertificateChain.make() }
        defer { chain.remove() }
        try await Self.withTLSServer(chain: chain.certificatePath, key: chain.keyPath) { port in
            let seen = NIOLockedValueBox(0)
            var accepting = BLIPWebSocketClient.Configuration()
            accepting.tls.customVerification = { certificates, promise in
                seen.withLockedValue { $0 = certificates.count }
                promise.succeed(.certificateVerified)
            }
            try await Self.exchange("wss://localhost:\(port)/", accepting)
            #expect(seen.withLockedValue { $0 } == 2, "leaf and CA")
            accepting.tls.serverName = "other.example.com"  // the callback decides on names too
            try await Self.exchange("wss://localhost:\(port)/", accepting)
            var refusing = BLIPWebSocketClient.Configuration()
            refusing.tls.trustRoots = .pemFile(chain.caPath)  // would pass on its own
            refusing.tls.customVerification = { _, promise in promise.succeed(.failed) }
            await Self.expectTLSFailure("wss://localhost:\(port)/", refusing)
        }
    }
}
