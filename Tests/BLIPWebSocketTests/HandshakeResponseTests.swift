import BLIP
import BLIPTestSupport
import BLIPWebSocket
import Foundation
import NIOCore
import NIOPosix
import Testing

/// What the client makes of the server's answer to its upgrade request: typed refusals, the 101's headers,
/// credentials from the URL.
@Suite("WebSocket handshake responses and refusals", .timeLimit(.minutes(3)))
struct HandshakeResponseTests {
    /// The servers' own loop: the shared ones are busy in the full suite.
    static let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)

    static var quiet: BLIPWebSocketClient.Configuration {
        var configuration = BLIPWebSocketClient.Configuration()
        configuration.heartbeatInterval = nil
        configuration.closeTimeout = .milliseconds(100)  // the canned servers never answer a close
        configuration.connectTimeout = .seconds(30)
        return configuration
    }

    /// The handshake error `url` ends in; records an issue for any other outcome.
    static func refusal(
        _ url: String,
        _ configuration: BLIPWebSocketClient.Configuration = quiet
    ) async -> BLIPHandshakeError? {
        do {
            let transport = try await BLIPWebSocketClient.openTransport(to: url, configuration: configuration)
            transport.close(.normal)
            Issue.record("the handshake succeeded")
        } catch let error as BLIPHandshakeError {
            return error
        } catch {
            Issue.record("not a BLIPHandshakeError: \(error)")
        }
        return nil
    }

    @Test("a 401 with one challenge: typed, with the challenge, the body and the URL")
    func unauthorized() async throws {
        let server = try await CannedHTTPServer(group: Self.group) { _ in
            .status(
                401,
                "Unauthorized",
                headers: ["WWW-Authenticate: Basic realm=\"Couchbase Sync Gateway\""],
                body: "{\"error\":\"Unauthorized\",\"reason\":\"Login required\"}"
            )
        }
        defer { Task { await server.close() } }
        let error = try #require(await Self.refusal(server.url("/db/_blipsync")))
        #expect(error.code == .unauthorized && error.status == 401 && error.reason == "Unauthorized")
        #expect(
            error.challenges == [
                BLIPAuthenticationChallenge(scheme: "Basic", parameters: ["realm": "Couchbase Sync Gateway"])
            ]
        )
        #expect(
            error.bodyText == "{\"error\":\"Unauthorized\",\"reason\":\"Login required\"}" && !error.bodyIsTruncated
        )
        #expect(error.url == server.url("/db/_blipsync") && error.redirects.isEmpty)
        #expect(!error.isTransient)
        #expect("\(error)".contains("401") && "\(error)".contains("Login required"))
    }

    @Test("a 401 with several challenges, in one header and in two")
    func severalChallenges() async throws {
        let server = try await CannedHTTPServer(group: Self.group) { _ in
            .status(
                401,
                "Unauthorized",
                headers: [
                    "WWW-Authenticate: Bearer realm=\"sg\", error=\"invalid_token\", Basic realm=\"a, \\\"b\\\"\"",
                    "www-authenticate: Negotiate",
                ]
            )
        }
        defer { Task { await server.close() } }
        let error = try #require(await Self.refusal(server.url()))
        #expect(
            error.challenges == [
                BLIPAuthenticationChallenge(scheme: "Bearer", parameters: ["realm": "sg", "error": "invalid_token"]),
                BLIPAuthenticationChallenge(scheme: "Basic", parameters: ["realm": "a, \"b\""]),
                BLIPAuthenticationChallenge(scheme: "Negotiate"),
            ]
        )
    }

    @Test(
        "each refusal has its kind, and says whether a retry can help",
        arguments: [
            (403, "Forbidden", BLIPHandshakeError.Code.forbidden, false),
            (404, "Not Found", .notFound, false),
            (400, "Bad Request", .refused, false),
            (408, "Request Timeout", .refused, true),
            (429, "Too Many Requests", .rateLimited, true),
            (500, "Internal Server Error", .serverError, true),
            (503, "Service Unavailable", .serverError, true),
            (200, "OK", .notWebSocket, false),
            (204, "No Content", .notWebSocket, false),
        ] as [(Int, String, BLIPHandshakeError.Code, Bool)]
    )
    func classification(status: Int, reason: String, kind: BLIPHandshakeError.Code, isTransient: Bool) async throws {
        let server = try await CannedHTTPServer(group: Self.group) { _ in
            .status(status, reason, headers: ["Retry-After: 7"], body: status == 204 ? "" : "why: \(status)")
        }
        defer { Task { await server.close() } }
        let error = try #require(await Self.refusal(server.url()))
        #expect(error.code == kind && error.status == status, "\(error)")
        #expect(error.isTransient == isTransient)
        #expect(error.retryAfter == .seconds(7))
        #expect(error.bodyText == (status == 204 ? "" : "why: \(status)"))
    }

    @Test("a 101 with a wrong Sec-WebSocket-Accept is not a WebSocket, whatever its subprotocol")
    func badAccept() async throws {
        let server = try await CannedHTTPServer(group: Self.group) { _ in
            .upgradeWithBadAccept(subprotocol: "BLIP_3+CBMobile_3")
        }
        defer { Task { await server.close() } }
        let error = try #require(await Self.refusal(server.url()))
        #expect(error.code == .notWebSocket && error.status == 101, "\(error)")
    }

    @Test("a body longer than the excerpt limit is cut there")
    func largeBody() async throws {
        let body = String(repeating: "0123456789abcdef", count: 1 << 16)  // 1 MiB
        let server = try await CannedHTTPServer(group: Self.group) { _ in .status(403, "Forbidden", body: body) }
        defer { Task { await server.close() } }
        let error = try #require(await Self.refusal(server.url()))
        #expect(error.code == .forbidden)
        #expect(error.body.count == BLIPHandshakeError.bodyExcerptLimit && error.bodyIsTruncated)
        #expect(error.bodyText == String(body.prefix(BLIPHandshakeError.bodyExcerptLimit)))
    }

    @Test("an endless body: the client stops reading at the excerpt and hangs up")
    func endlessBody() async throws {
        let server = try await CannedHTTPServer(group: Self.group) { _ in .endless(500, "Internal Server Error") }
        defer { Task { await server.close() } }
        let error = try #require(await Self.refusal(server.url()))
        #expect(error.code == .serverError && error.bodyIsTruncated)
        #expect(error.body == Array(repeating: UInt8(ascii: "x"), count: BLIPHandshakeError.bodyExcerptLimit))
        // The server's writes fail once the client has gone: what it wrote stops growing, far below its limit.
        var last = -1
        for _ in 0..<200 {
            let now = server.endlessBytesWritten
            if now == last { break }
            last = now
            try await Task.sleep(for: .milliseconds(50))
        }
        #expect(last < CannedHTTPServer.endlessLimit / 4, "the server wrote \(last) bytes")
    }

    @Test("every Set-Cookie of the 101 is readable on the connection")
    func setCookies() async throws {
        let server = try await CannedHTTPServer(group: Self.group) { _ in
            .upgrade(
                subprotocol: "BLIP_3+CBMobile_3",
                headers: ["Set-Cookie: SyncGatewaySession=abc; Path=/db", "X-Served-By: canned", "set-cookie: b=2"]
            )
        }
        defer { Task { await server.close() } }
        let response = try await BLIPWebSocketClient.connect(to: server.url("/db"), configuration: Self.quiet) {
            connection in connection.handshakeResponse
        }
        #expect(response?.status == 101 && response?.subprotocol == "BLIP_3+CBMobile_3")
        #expect(response?.headers["Set-Cookie"] == ["SyncGatewaySession=abc; Path=/db", "b=2"])
        #expect(response?.headers.first("x-served-by") == "canned")
    }

    @Test("against our server: a 101 with the negotiated subprotocol")
    func realServer() async throws {
        try await withServer(eventLoopGroup: Self.group) { server in
            let response = try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:\(server.port)/") { connection in
                _ = try await connection.sendRequest(BLIPRequest(profile: "echo"))
                return connection.handshakeResponse
            }
            #expect(response?.status == 101 && response?.subprotocol == "BLIP_3+CBMobile_3")
            #expect(response?.headers.contains("Sec-WebSocket-Accept") == true)
        }
    }

    @Test("credentials in the URL become Authorization: Basic, percent-decoded")
    func urlCredentials() async throws {
        let server = try await CannedHTTPServer(group: Self.group) { _ in .upgrade(subprotocol: "BLIP_3+CBMobile_3") }
        defer { Task { await server.close() } }
        let url = "ws://us%40er:p%3Ass%20w%C3%A9@127.0.0.1:\(server.port)/db/_blipsync"
        let transport = try await BLIPWebSocketClient.openTransport(to: url, configuration: Self.quiet)
        transport.close(.normal)
        let expected = "Basic " + Data("us@er:p:ss wé".utf8).base64EncodedString()
        #expect(server.requests.first?.headers["Authorization"] == [expected])
        #expect(server.requests.first?.target == "/db/_blipsync")
    }

    @Test("an Authorization header in the configuration wins over credentials in the URL")
    func configuredAuthorizationWins() async throws {
        let server = try await CannedHTTPServer(group: Self.group) { _ in .upgrade(subprotocol: "BLIP_3+CBMobile_3") }
        defer { Task { await server.close() } }
        var configuration = Self.quiet
        configuration.headers = ["authorization": "Bearer token"]
        let transport = try await BLIPWebSocketClient.openTransport(
            to: "ws://user:pass@127.0.0.1:\(server.port)/",
            configuration: configuration
        )
        transport.close(.normal)
        #expect(server.requests.first?.headers["Authorization"] == ["Bearer token"])
    }

    @Test("a URL's credentials are parsed, decoded, and never printed")
    func urlParsing() throws {
        let url = try #require(BLIPWebSocketURL("wss://a%20b:c%2Fd@Example.com:4984/db?x=1"))
        #expect(url.user == "a b" && url.password == "c/d" && url.host == "Example.com" && url.port == 4984)
        #expect(url.description == "wss://Example.com:4984/db?x=1")
        #expect(BLIPWebSocketURL("ws://only@h/")?.user == "only" && BLIPWebSocketURL("ws://only@h/")?.password == nil)
        #expect(BLIPWebSocketURL("ws://h/")?.user == nil)
        #expect(BLIPWebSocketURL("ws://u:p@ss@h/")?.password == "p@ss")
    }

    @Test("a server that is not there is still a transport failure, not a handshake error")
    func nothingListening() async throws {
        let server = try await CannedHTTPServer(group: Self.group) { _ in .status(200, "OK") }
        let url = server.url()
        await server.close()
        let error = await #expect(throws: BLIPConnectionError.self) {
            try await BLIPWebSocketClient.openTransport(to: url, configuration: Self.quiet)
        }
        #expect(error?.code == .transportFailed)
    }

    /// A server that accepts the TCP connection and never answers, in plain text and where TLS is
    /// expected: the connect gives up at the handshake timeout instead of waiting forever.
    @Test("a server that accepts and never answers: the connect times out", arguments: ["ws", "wss"])
    func silentServer(scheme: String) async throws {
        let silent = try await ServerBootstrap(group: Self.group).bind(host: "127.0.0.1", port: 0).get()
        defer { silent.close(promise: nil) }
        var configuration = Self.quiet
        configuration.handshakeTimeout = .milliseconds(300)
        let url = "\(scheme)://127.0.0.1:\(silent.localAddress!.port!)/"
        let started = ContinuousClock.now
        let error = await #expect(throws: BLIPConnectionError.self) {
            try await BLIPWebSocketClient.openTransport(to: url, configuration: configuration)
        }
        #expect(error?.code == .timedOut, "\(String(describing: error))")
        // Bounded: a hang shows up as the suite's time limit instead.
        #expect(ContinuousClock.now - started < .seconds(60))
    }
}

@Suite("WWW-Authenticate challenges (RFC 7235)")
struct AuthenticationChallengeTests {
    @Test("the RFC's own example: two challenges in one header, quoted strings with escapes")
    func rfcExample() {
        let challenges = BLIPAuthenticationChallenge.parse([
            "Newauth realm=\"apps\", type=1, title=\"Login to \\\"apps\\\"\", Basic realm=\"simple\""
        ])
        #expect(
            challenges == [
                BLIPAuthenticationChallenge(
                    scheme: "Newauth",
                    parameters: ["realm": "apps", "type": "1", "title": "Login to \"apps\""]
                ),
                BLIPAuthenticationChallenge(scheme: "Basic", parameters: ["realm": "simple"]),
            ]
        )
    }

    @Test("token68, bare schemes, stray commas and spaces, names in any case")
    func forms() {
        #expect(
            BLIPAuthenticationChallenge.parse(["Negotiate YII+/abc==, Basic REALM = \"x\" ,", ", ,Digest"]) == [
                BLIPAuthenticationChallenge(scheme: "Negotiate", token68: "YII+/abc=="),
                BLIPAuthenticationChallenge(scheme: "Basic", parameters: ["realm": "x"]),
                BLIPAuthenticationChallenge(scheme: "Digest"),
            ]
        )
        let basic = BLIPAuthenticationChallenge.parse(["basic realm=sync"]).first
        #expect(basic?.hasScheme("Basic") == true && basic?.realm == "sync")
        #expect(BLIPAuthenticationChallenge.parse(["", "   "]).isEmpty)
    }

    @Test("what cannot be parsed is skipped up to the next comma")
    func garbage() {
        #expect(
            BLIPAuthenticationChallenge.parse(["=== junk, Basic realm=\"y\" trailing, Bearer"]) == [
                BLIPAuthenticationChallenge(scheme: "Basic", parameters: ["realm": "y"]),
                BLIPAuthenticationChallenge(scheme: "Bearer"),
            ]
        )
        #expect(
            BLIPAuthenticationChallenge.parse(["Basic realm=\"unterminated"]) == [
                BLIPAuthenticationChallenge(scheme: "Basic", parameters: ["realm": "unterminated"])
            ]
        )
    }
}
