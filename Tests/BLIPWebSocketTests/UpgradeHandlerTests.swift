import BLIP
import BLIPTestSupport
import Dispatch
import Foundation
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import NIOSSL
import Synchronization
import Testing

@testable import BLIPWebSocket

/// The server's upgrade handler: what it sees of the request, and what its accepts and refusals put on the
/// wire, seen from BLIP clients and raw TCP clients over loopback.
@Suite("Upgrade handler over loopback", .timeLimit(.minutes(3)))
struct UpgradeHandlerTests {
    /// A loop of its own, as in ServerLimitsTests: the shared loops are busy in the full suite.
    static let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)

    /// A router whose `whoami` profile answers with what the handler sees: the identity (a String) and
    /// the upgrade request's `db` path parameter and `X-Test` header.
    static func router() -> BLIPRouter {
        var router = BLIPRouter()
        router.register(profile: "whoami") { _, context in
            BLIPResponse(
                properties: [
                    "Identity": context.identity(as: String.self) ?? "-",
                    "DB": context.upgradeRequest?.pathParameters["db"] ?? "-",
                    "X-Test": context.upgradeRequest?.headers.first("X-Test") ?? "-",
                ]
            )
        }
        return router
    }

    static func serve<T: Sendable>(
        _ configuration: BLIPWebSocketServer.Configuration = BLIPWebSocketServer.Configuration.forTests,
        upgradeHandler: BLIPWebSocketServer.UpgradeHandler?,
        _ body: @Sendable (BLIPWebSocketServer) async throws -> T
    ) async throws -> T {
        try await withServer(
            configuration,
            router: Self.router(),
            eventLoopGroup: Self.group,
            upgradeHandler: upgradeHandler,
            body
        )
    }

    /// Sends an upgrade request for `target` and returns what the server answered: up to the end of the
    /// head for a 101 (the connection stays open), all of it for a refusal.
    static func rawUpgrade(
        port: Int,
        target: String = "/",
        protocols: String = "BLIP_3+CBMobile_3",
        headers: [String] = [],
        tls: NIOSSLContext? = nil
    ) async throws -> String {
        let client = try await RawTCPClient.connect(port: port, group: Self.group, tls: tls)
        defer { Task { await client.close() } }
        var request = "GET \(target) HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        request += "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
        request += "Sec-WebSocket-Protocol: \(protocols)\r\n"
        for header in headers { request += header + "\r\n" }
        try? await client.send(Array((request + "\r\n").utf8))  // fails when a TLS handshake did
        guard let head = await client.received(through: "\r\n\r\n", within: .seconds(20)) else {
            let close = await client.serverClose(within: .seconds(20))
            return "no response; closed: \(close != nil)"
        }
        if String(decoding: head, as: UTF8.self).hasPrefix("HTTP/1.1 101") {
            return String(decoding: head, as: UTF8.self)
        }
        let close = try #require(await client.serverClose(within: .seconds(20)), "a refusal left the connection open")
        return String(decoding: close.bytes, as: UTF8.self)
    }

    static func connect(
        port: Int,
        target: String = "/",
        headers: HTTPFields = [:],
        _ body: @Sendable (BLIPConnection) async throws -> Void
    ) async throws {
        var configuration = BLIPWebSocketClient.Configuration()
        configuration.heartbeatInterval = nil
        configuration.headers = headers
        try await BLIPWebSocketClient.connect(
            to: "ws://127.0.0.1:\(port)\(target)",
            configuration: configuration,
            eventLoopGroup: Self.group
        ) { connection in try await body(connection) }
    }

    static func whoami(_ connection: BLIPConnection) async throws -> [String: String] {
        let reply = try await connection.sendRequest(BLIPRequest(profile: "whoami"))
        return ["Identity", "DB", "X-Test"].reduce(into: [:]) { $0[$1] = reply.properties[$1] }
    }

    @Test("an accept's identity reaches every handler; the upgrade request is on the connection")
    func acceptWithIdentity() async throws {
        let seen = NIOLockedValueBox<[BLIPUpgradeRequest]>([])
        let handler: BLIPWebSocketServer.UpgradeHandler = { request in
            seen.withLockedValue { $0.append(request) }
            return .accept(identity: request.headers.first("X-User") ?? "nobody")
        }
        try await Self.serve(upgradeHandler: handler) { server in
            try await Self.connect(
                port: server.port,
                target: "/db?since=12&x=%20",
                headers: ["X-User": "alice", "X-Test": "t"]
            ) {
                connection in
                let first = try await Self.whoami(connection)
                let second = try await Self.whoami(connection)
                #expect(first == ["Identity": "alice", "DB": "-", "X-Test": "t"])
                #expect(second["Identity"] == "alice")
            }
        }
        let request = try #require(seen.withLockedValue { $0.first })
        #expect(seen.withLockedValue { $0.count } == 1)
        #expect(request.method == "GET" && request.uri == "/db?since=12&x=%20")
        #expect(request.path == "/db" && request.query == "since=12&x=%20")
        #expect(request.subprotocol == "BLIP_3+CBMobile_3")
        #expect(request.remoteAddress?.hasPrefix("127.0.0.1:") == true, "\(request.remoteAddress ?? "nil")")
        #expect(request.peerCertificateChain.isEmpty && request.pathParameters.isEmpty)
        #expect(request.headers.first("x-user") == "alice")
    }

    @Test("without an upgrade handler, connections have no identity")
    func noHandler() async throws {
        try await Self.serve(upgradeHandler: nil) { server in
            try await Self.connect(port: server.port) { connection in
                let seen = try await Self.whoami(connection)
                #expect(seen["Identity"] == "-")
            }
        }
    }

    @Test("an accept's headers are on the 101, repeated Set-Cookie fields included")
    func acceptHeaders() async throws {
        let handler: BLIPWebSocketServer.UpgradeHandler = { _ in
            .accept(
                identity: nil,
                headers: HTTPFields([
                    ("Set-Cookie", "SyncGatewaySession=abc123; Path=/db"), ("Set-Cookie", "Other=1"),
                    ("X-Served-By", "test"),
                ])
            )
        }
        try await Self.serve(upgradeHandler: handler) { server in
            let head = try await Self.rawUpgrade(port: server.port)
            #expect(head.hasPrefix("HTTP/1.1 101 Switching Protocols\r\n"), "\(head)")
            #expect(head.contains("\r\nSet-Cookie: SyncGatewaySession=abc123; Path=/db\r\n"))
            #expect(head.contains("\r\nSet-Cookie: Other=1\r\n"))
            #expect(head.contains("\r\nX-Served-By: test\r\n"))
            #expect(head.lowercased().contains("\r\nsec-websocket-protocol: blip_3+cbmobile_3\r\n"))
            #expect(head.lowercased().contains("\r\nsec-websocket-accept: s3pplmbitxaq9kygzzhzrbk+xoo=\r\n"))
        }
    }

    @Test(
        "refusals carry their status, headers and body; the connection closes",
        arguments: [
            (
                BLIPUpgradeDecision.unauthorized(realm: "blip"), "401", "WWW-Authenticate: Basic realm=\"blip\"",
                "authentication required"
            ),
            (.forbidden("no access to db"), "403", "Content-Type: text/plain; charset=utf-8", "no access to db"),
            (.notFound("no such database"), "404", "Content-Length: 16", "no such database"),
            (
                .refuse(
                    status: 307,
                    headers: ["Location": "/elsewhere", "Content-Type": "application/json"],
                    body: "{}"
                ),
                "307", "Location: /elsewhere", "{}"
            ),
        ]
    )
    func refusals(decision: BLIPUpgradeDecision, status: String, header: String, body: String) async throws {
        let handler: BLIPWebSocketServer.UpgradeHandler = { _ in decision }
        try await Self.serve(upgradeHandler: handler) { server in
            let response = try await Self.rawUpgrade(port: server.port)
            #expect(response.hasPrefix("HTTP/1.1 \(status) "), "\(response)")
            #expect(response.contains("\r\n\(header)\r\n"), "\(response)")
            #expect(response.hasSuffix("\r\n\r\n\(body)"), "\(response)")
            #expect(response.ranges(of: "Content-Type").count == 1, "one Content-Type")
            #expect(!response.lowercased().contains("sec-websocket-accept"))
        }
    }

    @Test("a refusal reaches a BLIP client as a typed handshake error with the challenge")
    func refusalSeenByClient() async throws {
        let handler: BLIPWebSocketServer.UpgradeHandler = { _ in .unauthorized(realm: "blip") }
        try await Self.serve(upgradeHandler: handler) { server in
            let error = await #expect(throws: BLIPHandshakeError.self) {
                try await Self.connect(port: server.port) { _ in }
            }
            #expect(error?.code == .unauthorized && error?.status == 401)
            #expect(error?.challenges.first?.scheme.lowercased() == "basic")
            #expect(error?.challenges.first?.realm == "blip")
            #expect(error?.isTransient == false)
        }
    }

    @Test("an upgrade handler may suspend; several connections wait at once")
    func asyncHandler() async throws {
        let calls = NIOLockedValueBox(0)
        let handler: BLIPWebSocketServer.UpgradeHandler = { request in
            calls.withLockedValue { $0 += 1 }
            try await Task.sleep(for: .milliseconds(200))
            return .accept(identity: request.headers.first("X-User"))
        }
        try await Self.serve(upgradeHandler: handler) { server in
            try await withThrowingTaskGroup(of: Void.self) { group in
                for user in ["a", "b", "c"] {
                    group.addTask {
                        try await Self.connect(port: server.port, headers: ["X-User": user]) { connection in
                            let seen = try await Self.whoami(connection)
                            #expect(seen["Identity"] == user)
                        }
                    }
                }
                try await group.waitForAll()
            }
        }
        #expect(calls.withLockedValue { $0 } == 3)
    }

    struct SecretError: Error, CustomStringConvertible {
        var description: String { "database password is hunter2" }
    }

    @Test("a handler that throws gets the client a 500 with a generic body, never the error's text")
    func throwingHandler() async throws {
        let handler: BLIPWebSocketServer.UpgradeHandler = { _ in throw SecretError() }
        try await Self.serve(upgradeHandler: handler) { server in
            let response = try await Self.rawUpgrade(port: server.port)
            #expect(response.hasPrefix("HTTP/1.1 500 Internal Server Error\r\n"), "\(response)")
            #expect(response.hasSuffix("\r\n\r\ninternal server error"))
            #expect(!response.contains("hunter2"))
        }
    }

    @Test(
        "a refusal body over 64 KiB, or a decision that breaks the response, is answered with a bare 500",
        arguments: [
            BLIPUpgradeDecision.refuse(
                status: 403,
                headers: [:],
                body: String(repeating: "x", count: BLIPUpgradeDecision.maximumRefusalBodySize + 1)
            ),
            .refuse(status: 200, headers: [:], body: "not a refusal"),
            .refuse(status: 401, headers: ["Content-Length": "1"], body: "length"),
            .accept(identity: nil, headers: ["Sec-WebSocket-Protocol": "other"]),
        ]
    )
    func invalidDecisions(decision: BLIPUpgradeDecision) async throws {
        let handler: BLIPWebSocketServer.UpgradeHandler = { _ in decision }
        try await Self.serve(upgradeHandler: handler) { server in
            let response = try await Self.rawUpgrade(port: server.port)
            #expect(response.hasPrefix("HTTP/1.1 500 Internal Server Error\r\n"), "\(response.prefix(200))")
            #expect(response.hasSuffix("\r\n\r\ninternal server error"))
            #expect(!response.contains("injected") && !response.contains("xxxx"))
        }
    }

    @Test(
        "a header value with CR or LF cannot split the response: HTTPFields makes them spaces, one field",
        arguments: [
            BLIPUpgradeDecision.refuse(status: 401, headers: ["X-Evil": "a\r\nSet-Cookie: injected=1"], body: "split"),
            .accept(identity: nil, headers: ["X-Evil": "a\nSet-Cookie: injected=1"]),
        ]
    )
    func headerSplitting(decision: BLIPUpgradeDecision) async throws {
        let handler: BLIPWebSocketServer.UpgradeHandler = { _ in decision }
        try await Self.serve(upgradeHandler: handler) { server in
            let response = try await Self.rawUpgrade(port: server.port)
            let head = response.components(separatedBy: "\r\n\r\n")[0]
            let lines = head.components(separatedBy: "\r\n")
            #expect(lines.allSatisfy { !$0.contains("\n") && !$0.contains("\r") }, "\(head)")
            #expect(!lines.contains { $0.lowercased().hasPrefix("set-cookie") }, "\(head)")
            #expect(lines.filter { $0.hasPrefix("X-Evil: a") }.count == 1, "\(head)")
        }
    }

    @Test("a refusal body of exactly 64 KiB is sent whole")
    func refusalBodyAtTheCap() async throws {
        let body = String(repeating: "y", count: BLIPUpgradeDecision.maximumRefusalBodySize)
        let handler: BLIPWebSocketServer.UpgradeHandler = { _ in .forbidden(body) }
        try await Self.serve(upgradeHandler: handler) { server in
            let response = try await Self.rawUpgrade(port: server.port)
            #expect(response.hasPrefix("HTTP/1.1 403 Forbidden\r\n"))
            #expect(response.contains("\r\nContent-Length: \(body.utf8.count)\r\n"))
            #expect(response.hasSuffix("\r\n\r\n" + body))
        }
    }

    @Test("a handler that never answers: the connection closes at the handshake timeout, its task is cancelled")
    func handlerNeverAnswers() async throws {
        var configuration = BLIPWebSocketServer.Configuration.forTests
        // Wide enough for the connect and the request to get there first on a busy machine.
        configuration.handshakeTimeout = .seconds(4)
        let started = NIOLockedValueBox(false)
        let cancelled = NIOLockedValueBox(false)
        let handler: BLIPWebSocketServer.UpgradeHandler = { _ in
            started.withLockedValue { $0 = true }
            do {
                try await Task.sleep(for: .seconds(3600))
            } catch {
                cancelled.withLockedValue { $0 = Task.isCancelled }
                throw error
            }
            return .accept()
        }
        try await Self.serve(configuration, upgradeHandler: handler) { server in
            let request =
                "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                + "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                + "Sec-WebSocket-Protocol: BLIP_3+CBMobile_3\r\n\r\n"
            // On a busy machine the timeout may pass before the request is even sent: then try again (at most
            // five times), since only a request that reached the handler tests anything.
            for _ in 0..<5 where !started.withLockedValue({ $0 }) {
                let client = try await RawTCPClient.connect(port: server.port, group: Self.group)
                try? await client.send(Array(request.utf8))
                let close = try #require(await client.serverClose(within: .seconds(20)), "still open after 20 s")
                #expect(close.after >= .milliseconds(3900), "closed after \(close.after)")
                #expect(close.bytes.isEmpty, "nothing written: \(String(decoding: close.bytes, as: UTF8.self))")
            }
            try #require(started.withLockedValue { $0 }, "the handler was never asked")
            // The cancellation reaches the handler's task soon after the close.
            for _ in 0..<200 where !cancelled.withLockedValue({ $0 }) { try await Task.sleep(for: .milliseconds(50)) }
            #expect(cancelled.withLockedValue { $0 })
        }
    }

    @Test("path and subprotocol checks come first: the handler is not asked about a request they refuse")
    func checksBeforeHandler() async throws {
        var configuration = BLIPWebSocketServer.Configuration.forTests
        configuration.path = "/db/_blipsync"
        let calls = NIOLockedValueBox(0)
        let handler: BLIPWebSocketServer.UpgradeHandler = { _ in
            calls.withLockedValue { $0 += 1 }
            return .forbidden()
        }
        try await Self.serve(configuration, upgradeHandler: handler) { server in
            let wrongPath = try await Self.rawUpgrade(port: server.port, target: "/other/_blipsync")
            #expect(wrongPath.hasPrefix("HTTP/1.1 404 Not Found\r\n"), "\(wrongPath)")
            let wrongProtocol = try await Self.rawUpgrade(
                port: server.port,
                target: "/db/_blipsync",
                protocols: "BLIP_9"
            )
            #expect(wrongProtocol.hasPrefix("HTTP/1.1 500 Internal Server Error\r\n"))
            #expect(wrongProtocol.contains("I only speak"))
            #expect(calls.withLockedValue { $0 } == 0)
            let asked = try await Self.rawUpgrade(port: server.port, target: "/db/_blipsync?x=1")
            #expect(asked.hasPrefix("HTTP/1.1 403 Forbidden\r\n"))
            #expect(calls.withLockedValue { $0 } == 1)
        }
    }

    @Test("raw WebSocket endpoints are decided by the upgrade handler too")
    func rawEndpointIsDecided() async throws {
        var configuration = BLIPWebSocketServer.Configuration.forTests
        configuration.rawEndpoint = .forSubprotocol(BLIPRawWebSocket.benchmarkSubprotocol)
        let handler: BLIPWebSocketServer.UpgradeHandler = { _ in .unauthorized(realm: "raw") }
        try await Self.serve(configuration, upgradeHandler: handler) { server in
            let response = try await Self.rawUpgrade(
                port: server.port,
                protocols: BLIPRawWebSocket.benchmarkSubprotocol
            )
            #expect(response.hasPrefix("HTTP/1.1 401 Unauthorized\r\n"), "\(response)")
        }
    }

    @Test(
        "a path pattern captures its {name} segments, percent-decoded; other paths get 404 without the handler",
        arguments: [
            ("/db1/_blipsync", "db1"),
            ("/my%20db%2Fx/_blipsync?client=1", "my db/x"),
            ("/caf%C3%A9/_blipsync", "café"),
            ("/db/_blipsync/extra", nil),
            ("//_blipsync", nil),
            ("/db/_changes", nil),
            ("/%FF/_blipsync", nil),
        ] as [(String, String?)]
    )
    func pathPattern(target: String, database: String?) async throws {
        var configuration = BLIPWebSocketServer.Configuration.forTests
        configuration.path = "/{db}/_blipsync"
        let calls = NIOLockedValueBox(0)
        let handler: BLIPWebSocketServer.UpgradeHandler = { request in
            calls.withLockedValue { $0 += 1 }
            return .accept(identity: "user of \(request.pathParameters["db"] ?? "?")")
        }
        try await Self.serve(configuration, upgradeHandler: handler) { server in
            guard let database else {
                let response = try await Self.rawUpgrade(port: server.port, target: target)
                #expect(response.hasPrefix("HTTP/1.1 404 Not Found\r\n"), "\(response)")
                #expect(calls.withLockedValue { $0 } == 0)
                return
            }
            try await Self.connect(port: server.port, target: target) { connection in
                let seen = try await Self.whoami(connection)
                #expect(seen["DB"] == database && seen["Identity"] == "user of \(database)")
                #expect(connection.upgradeRequest == nil, "a client's connection has no upgrade request")
            }
            #expect(calls.withLockedValue { $0 } == 1)
        }
    }
}

@Suite(
    "Client certificates over loopback",
    .enabled(if: TestCertificate.isAvailable, "needs the openssl command"),
    .timeLimit(.minutes(3))
)
struct ClientCertificateTests {
    /// Accepts a client whose certificate is `expected` (DER), 403 for one without a certificate.
    static func handler(expecting expected: [UInt8]) -> BLIPWebSocketServer.UpgradeHandler {
        { request in
            guard let leaf = request.peerCertificateChain.first else { return .forbidden("no client certificate") }
            return leaf == expected ? .accept(identity: "certified") : .refuse(status: 500, headers: [:], body: "?")
        }
    }

    static func clientContext(server: TestCertificate, client: TestCertificate?) throws -> NIOSSLContext {
        var configuration = TLSConfiguration.makeClientConfiguration()
        configuration.trustRoots = .certificates(try NIOSSLCertificate.fromPEMFile(server.certificatePath))
        if let client {
            configuration.certificateChain = try NIOSSLCertificate.fromPEMFile(client.certificatePath).map {
                .certificate($0)
            }
            configuration.privateKey = .privateKey(try NIOSSLPrivateKey(file: client.keyPath, format: .pem))
        }
        return try NIOSSLContext(configuration: configuration)
    }

    /// Runs `body` against a TLS server that asks for client certificates as `policy` says (trusting the
    /// client certificate's own), whose upgrade handler wants exactly that certificate.
    static func withCertificateServer(
        _ policy: @Sendable (String) -> BLIPWebSocketServer.TLS.ClientCertificates,
        _ body: @Sendable (BLIPWebSocketServer, TestCertificate, TestCertificate) async throws -> Void
    ) async throws {
        let (serverCertificate, clientCertificate) = try await offThePool {
            (try TestCertificate.make(), try TestCertificate.make())
        }
        defer {
            serverCertificate.remove()
            clientCertificate.remove()
        }
        let clientDER = try NIOSSLCertificate.fromPEMFile(clientCertificate.certificatePath)[0].toDERBytes()
        var configuration = BLIPWebSocketServer.Configuration.forTests
        configuration.tls = serverCertificate.serverTLS
        configuration.tls?.clientCertificates = policy(clientCertificate.certificatePath)
        try await UpgradeHandlerTests.serve(configuration, upgradeHandler: Self.handler(expecting: clientDER)) {
            server in
            try await body(server, serverCertificate, clientCertificate)
        }
    }

    @Test("optional: the handler sees the certificate a client presented, and none from one that did not")
    func optional() async throws {
        let policy: @Sendable (String) -> BLIPWebSocketServer.TLS.ClientCertificates = { .optional(trustRootsPath: $0) }
        try await Self.withCertificateServer(policy) { server, serverCertificate, client in
            let with = try await UpgradeHandlerTests.rawUpgrade(
                port: server.port,
                tls: Self.clientContext(server: serverCertificate, client: client)
            )
            #expect(with.hasPrefix("HTTP/1.1 101 "), "\(with)")
            let without = try await UpgradeHandlerTests.rawUpgrade(
                port: server.port,
                tls: Self.clientContext(server: serverCertificate, client: nil)
            )
            #expect(without.hasPrefix("HTTP/1.1 403 ") && without.hasSuffix("no client certificate"), "\(without)")
            // A certificate the server does not trust (the server's own) fails the TLS handshake.
            let untrusted = try await UpgradeHandlerTests.rawUpgrade(
                port: server.port,
                tls: Self.clientContext(server: serverCertificate, client: serverCertificate)
            )
            #expect(untrusted.hasPrefix("no response"), "\(untrusted)")
        }
    }

    @Test("required: a client without a trusted certificate fails the TLS handshake")
    func required() async throws {
        let policy: @Sendable (String) -> BLIPWebSocketServer.TLS.ClientCertificates = { .required(trustRootsPath: $0) }
        try await Self.withCertificateServer(policy) { server, serverCertificate, client in
            let without = try await UpgradeHandlerTests.rawUpgrade(
                port: server.port,
                tls: Self.clientContext(server: serverCertificate, client: nil)
            )
            #expect(without.hasPrefix("no response"), "\(without)")
            let with = try await UpgradeHandlerTests.rawUpgrade(
                port: server.port,
                tls: Self.clientContext(server: serverCertificate, client: client)
            )
            #expect(with.hasPrefix("HTTP/1.1 101 "), "\(with)")
        }
    }

    /// The library's own client: a certificate from PEM files or from PEM text in memory is presented and
    /// reaches the server's upgrade decision as the identity; without one, or with one the server does not
    /// trust, the connect fails with a `BLIPConnectionError` that says the TLS handshake failed.
    @Test("the client presents its certificate (files or in memory); without a trusted one it is refused")
    func clientPresentsCertificate() async throws {
        let policy: @Sendable (String) -> BLIPWebSocketServer.TLS.ClientCertificates = { .required(trustRootsPath: $0) }
        try await Self.withCertificateServer(policy) { server, serverCertificate, client in
            let url = "wss://localhost:\(server.port)/"
            var configuration = BLIPWebSocketClient.Configuration()
            configuration.heartbeatInterval = nil
            configuration.tls.trustRoots = .pemFile(serverCertificate.certificatePath)
            let fromFiles = client.clientCertificate
            let inMemory = BLIPWebSocketClient.TLS.ClientCertificate.pem(
                certificateChain: try String(contentsOfFile: client.certificatePath, encoding: .utf8),
                privateKey: try String(contentsOfFile: client.keyPath, encoding: .utf8)
            )
            for certificate in [fromFiles, inMemory] {
                configuration.tls.clientCertificate = certificate
                let identity = try await BLIPWebSocketClient.connect(to: url, configuration: configuration) {
                    connection in
                    try await connection.sendRequest(BLIPRequest(profile: "whoami")).properties["Identity"]
                }
                #expect(identity == "certified")
            }
            let untrusted = serverCertificate.clientCertificate
            for certificate in [nil, untrusted] {
                configuration.tls.clientCertificate = certificate
                let error = await #expect(throws: BLIPConnectionError.self) {
                    try await BLIPWebSocketClient.connect(to: url, configuration: configuration) { _ in }
                }
                #expect(error?.code == .tlsFailed, "\(String(describing: error))")
            }
        }
    }
}

@Suite("Upgrade request helpers")
struct UpgradeRequestHelperTests {
    @Test("Basic credentials: user and password (colons allowed in it); nil when absent or malformed")
    func basicCredentials() {
        func credentials(_ authorization: String?) -> [String]? {
            let headers: HTTPFields = authorization.map { ["Authorization": $0] } ?? [:]
            return BLIPUpgradeRequest(uri: "/", headers: headers).basicCredentials.map { [$0.user, $0.password] }
        }
        #expect(credentials("Basic YWxpY2U6c2VjcmV0") == ["alice", "secret"])  // alice:secret
        #expect(credentials("basic  YWxpY2U6YTpi") == ["alice", "a:b"])  // alice:a:b
        #expect(credentials("Basic OnNlY3JldA==") == ["", "secret"])  // :secret
        #expect(credentials(nil) == nil)
        #expect(credentials("Bearer YWxpY2U6c2VjcmV0") == nil)
        #expect(credentials("Basic YWxpY2U=") == nil, "no colon")
        #expect(credentials("Basic !!!") == nil, "not base64")
        #expect(credentials("Basic") == nil)
    }

    @Test("cookies by name, across Cookie headers; nil when absent")
    func cookies() {
        let request = BLIPUpgradeRequest(
            uri: "/",
            headers: HTTPFields([("Cookie", "a=1; SyncGatewaySession=abc=; b"), ("Cookie", "c=\"q\"")])
        )
        #expect(request.cookie(named: "SyncGatewaySession") == "abc=")
        #expect(request.cookie(named: "a") == "1" && request.cookie(named: "c") == "\"q\"")
        #expect(request.cookie(named: "b") == nil && request.cookie(named: "A") == nil)
    }

    @Test("the request target splits into path and query at the first ?")
    func pathAndQuery() {
        let request = BLIPUpgradeRequest(uri: "/db/_blipsync?a=1?b")
        #expect(request.path == "/db/_blipsync" && request.query == "a=1?b")
        #expect(BLIPUpgradeRequest(uri: "/x").query == nil && BLIPUpgradeRequest(uri: "/x?").query == "")
    }

    @Test("path patterns: exact literals, {name} segments, no partial-segment captures")
    func patterns() {
        #expect(PathPattern("/db/_blipsync").match("/db/_blipsync") == [:])
        #expect(PathPattern("/db/_blipsync").match("/db/_blipsync/") == nil)
        #expect(PathPattern("/{db}/{scope}").match("/a/b%2Bc") == ["db": "a", "scope": "b+c"])
        #expect(PathPattern("/{db}").match("/") == nil)
        #expect(PathPattern("/x{db}").match("/xa") == nil, "braces inside a segment are literal")
        #expect(PathPattern("/x{db}").match("/x{db}") == [:])
        #expect(PathPattern("/{}").match("/{}") == [:], "an empty name is literal")
    }

    @Test("the Basic challenge escapes quotes in the realm")
    func challenge() {
        guard case .refuse(401, let headers, _) = BLIPUpgradeDecision.unauthorized(realm: "a \"b\"") else {
            Issue.record("not a 401")
            return
        }
        #expect(headers.first("WWW-Authenticate") == "Basic realm=\"a \\\"b\\\"\"")
    }
}
