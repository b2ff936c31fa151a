import BLIP
import BLIPTestSupport
import BLIPWebSocket
import Foundation
import NIOCore
import NIOPosix
import NIOSSL
import Testing

@Suite("WebSocket handshake redirects", .timeLimit(.minutes(3)))
struct RedirectTests {
    /// The servers' own loop: the shared ones are busy in the full suite.
    static let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)

    static var quiet: BLIPWebSocketClient.Configuration { HandshakeResponseTests.quiet }

    @Test("a relative Location resolves against the request URL; the same origin keeps credentials and cookies")
    func relativeSameOrigin() async throws {
        let server = try await CannedHTTPServer(group: Self.group) { request in
            request.target == "/db/start"
                ? .status(307, "Temporary Redirect", headers: ["Location: ../final?x=1"])
                : .upgrade(subprotocol: "BLIP_3+CBMobile_3")
        }
        defer { Task { await server.close() } }
        var configuration = Self.quiet
        configuration.headers = ["Cookie": "SyncGatewaySession=abc"]
        let transport = try await BLIPWebSocketClient.openTransport(
            to: "ws://user:pw@127.0.0.1:\(server.port)/db/start",
            configuration: configuration
        )
        transport.close(.normal)
        #expect(transport.handshakeResponse?.status == 101)
        let requests = server.requests
        #expect(requests.map(\.target) == ["/db/start", "/final?x=1"])
        let basic = "Basic " + Data("user:pw".utf8).base64EncodedString()
        #expect(requests.map { $0.headers["Authorization"] } == [[basic], [basic]])
        #expect(requests.map { $0.headers["Cookie"] } == [["SyncGatewaySession=abc"], ["SyncGatewaySession=abc"]])
    }

    @Test(
        "to another origin (another port, an http:// Location), Authorization and Cookie are dropped",
        arguments: [301, 302, 303, 308]
    )
    func otherOrigin(status: Int) async throws {
        let target = try await CannedHTTPServer(group: Self.group) { _ in .upgrade(subprotocol: "BLIP_3+CBMobile_3") }
        defer { Task { await target.close() } }
        let origin = try await CannedHTTPServer(group: Self.group) { _ in
            .status(status, "Moved", headers: ["Location: http://127.0.0.1:\(target.port)/elsewhere"])
        }
        defer { Task { await origin.close() } }
        var configuration = Self.quiet
        configuration.headers = ["Cookie": "SyncGatewaySession=abc", "X-Trace": "1"]
        let transport = try await BLIPWebSocketClient.openTransport(
            to: "ws://user:pw@127.0.0.1:\(origin.port)/db",
            configuration: configuration
        )
        transport.close(.normal)
        #expect(transport.subprotocol == "BLIP_3+CBMobile_3")
        let first = try #require(origin.requests.first)
        #expect(first.headers.contains("Authorization") && first.headers.contains("Cookie"))
        let second = try #require(target.requests.first)
        #expect(second.target == "/elsewhere")
        #expect(!second.headers.contains("Authorization") && !second.headers.contains("Cookie"))
        #expect(second.headers.first("X-Trace") == "1", "other headers go along")
        #expect(second.headers.first("Host") == "127.0.0.1:\(target.port)")
    }

    @Test(
        "configured credentials (a bearer token, a session cookie) follow a same-origin redirect, not another origin",
        arguments: [BLIPCredentials.bearer("tok"), .cookie(name: "SyncGatewaySession", value: "abc")]
    )
    func configuredCredentials(_ credentials: BLIPCredentials) async throws {
        let target = try await CannedHTTPServer(group: Self.group) { _ in .upgrade(subprotocol: "BLIP_3+CBMobile_3") }
        defer { Task { await target.close() } }
        let origin = try await CannedHTTPServer(group: Self.group) { request in
            request.target == "/db/start"
                ? .status(307, "Temporary Redirect", headers: ["Location: /db/again"])
                : .status(302, "Found", headers: ["Location: ws://127.0.0.1:\(target.port)/elsewhere"])
        }
        defer { Task { await origin.close() } }
        var configuration = Self.quiet
        configuration.credentials = credentials
        let transport = try await BLIPWebSocketClient.openTransport(
            to: "ws://127.0.0.1:\(origin.port)/db/start",
            configuration: configuration
        )
        transport.close(.normal)
        let expected =
            "\(credentials)".contains("cookie") ? ("Cookie", "SyncGatewaySession=abc") : ("Authorization", "Bearer tok")
        #expect(origin.requests.map { $0.headers[expected.0] } == [[expected.1], [expected.1]])
        let moved = try #require(target.requests.first)
        #expect(!moved.headers.contains("Authorization") && !moved.headers.contains("Cookie"))
    }

    @Test("a cookie credential: one Cookie line with the configured cookies, replacing one of its name; no URL user")
    func cookieCredential() async throws {
        let server = try await CannedHTTPServer(group: Self.group) { _ in .upgrade(subprotocol: "BLIP_3+CBMobile_3") }
        defer { Task { await server.close() } }
        var configuration = Self.quiet
        configuration.headers = ["Cookie": "a=1; SyncGatewaySession=old"]
        configuration.headers.append(HTTPField(name: .cookie, value: "b=2"))
        configuration.credentials = .cookie(name: "SyncGatewaySession", value: "new")
        let transport = try await BLIPWebSocketClient.openTransport(
            to: "ws://user:pw@127.0.0.1:\(server.port)/db",
            configuration: configuration
        )
        transport.close(.normal)
        let request = try #require(server.requests.first)
        #expect(request.headers["Cookie"] == ["a=1; b=2; SyncGatewaySession=new"])
        #expect(!request.headers.contains("Authorization"), "configured credentials stand in for the URL's user")
    }

    @Test("a loop ends in a typed error listing the chain")
    func loop() async throws {
        let server = try await CannedHTTPServer(group: Self.group) { request in
            .status(302, "Found", headers: ["Location: \(request.target == "/a" ? "/b" : "/a")"])
        }
        defer { Task { await server.close() } }
        let error = try #require(await HandshakeResponseTests.refusal(server.url("/a")))
        #expect(error.code == .redirectLoop, "\(error)")
        #expect(error.redirects == [server.url("/a")] && error.url == server.url("/b"))
        #expect(server.requests.count == 2 && !error.isTransient)
        #expect("\(error)".contains(server.url("/a")))
    }

    @Test("more redirects than the maximum end in a typed error listing the chain")
    func tooMany() async throws {
        let server = try await CannedHTTPServer(group: Self.group) { request in
            let next = Int(request.target.dropFirst(2))! + 1
            return .status(308, "Permanent Redirect", headers: ["Location: /r\(next)"])
        }
        defer { Task { await server.close() } }
        var configuration = Self.quiet
        configuration.maximumRedirects = 2
        let error = try #require(await HandshakeResponseTests.refusal(server.url("/r0"), configuration))
        #expect(error.code == .tooManyRedirects, "\(error)")
        #expect(error.redirects == [server.url("/r0"), server.url("/r1")] && error.url == server.url("/r2"))
        #expect(server.requests.map(\.target) == ["/r0", "/r1", "/r2"])
        #expect(BLIPWebSocketClient.Configuration().maximumRedirects == 5)
    }

    @Test("with redirects off, a redirect is a typed error with its Location")
    func off() async throws {
        let server = try await CannedHTTPServer(group: Self.group) { _ in
            .status(301, "Moved Permanently", headers: ["Location: ws://example.com/db"])
        }
        defer { Task { await server.close() } }
        var configuration = Self.quiet
        configuration.maximumRedirects = 0
        let error = try #require(await HandshakeResponseTests.refusal(server.url(), configuration))
        #expect(error.code == .redirect && error.status == 301 && error.location == "ws://example.com/db")
        #expect(server.requests.count == 1)
    }

    @Test("a redirect without a usable Location is not followed")
    func unusableLocation() async throws {
        let server = try await CannedHTTPServer(group: Self.group) { _ in
            .status(302, "Found", headers: ["Location: ftp://example.com/"])
        }
        defer { Task { await server.close() } }
        let error = try #require(await HandshakeResponseTests.refusal(server.url()))
        #expect(error.code == .redirect && error.location == "ftp://example.com/" && server.requests.count == 1)
    }

    @Test("wss:// to ws:// is refused", .enabled(if: TestCertificate.isAvailable))
    func downgrade() async throws {
        let certificate = try await offThePool { try TestCertificate.make() }
        defer { certificate.remove() }
        let plain = try await CannedHTTPServer(group: Self.group) { _ in .upgrade(subprotocol: "BLIP_3+CBMobile_3") }
        defer { Task { await plain.close() } }
        let tls = try NIOSSLContext(
            configuration: .makeServerConfiguration(
                certificateChain: try NIOSSLCertificate.fromPEMFile(certificate.certificatePath).map {
                    .certificate($0)
                },
                privateKey: .privateKey(try NIOSSLPrivateKey(file: certificate.keyPath, format: .pem))
            )
        )
        let secure = try await CannedHTTPServer(group: Self.group, tls: tls) { _ in
            .status(301, "Moved Permanently", headers: ["Location: ws://127.0.0.1:\(plain.port)/db"])
        }
        defer { Task { await secure.close() } }
        var configuration = Self.quiet
        configuration.tls.trustRoots = .pemFile(certificate.certificatePath)
        let error = try #require(
            await HandshakeResponseTests.refusal("wss://127.0.0.1:\(secure.port)/db", configuration)
        )
        #expect(error.code == .insecureRedirect, "\(error)")
        #expect(secure.requests.count == 1 && plain.requests.isEmpty)
    }
}
