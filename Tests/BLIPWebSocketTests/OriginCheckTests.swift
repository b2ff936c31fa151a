import BLIP
import Foundation
import NIOCore
import NIOPosix
import Testing

@testable import BLIPWebSocket

/// Cross-site WebSocket hijacking: a page of any site can ask the user's browser to open a WebSocket to the
/// BLIP endpoint, and the browser sends the user's cookies and cached Basic credentials with it. The
/// endpoint checks `Origin`, on by default: no `Origin` (not a browser) and the server's own pages pass,
/// other sites get 403 unless allowed.
@Suite("Origin checks against cross-site WebSocket hijacking", .timeLimit(.minutes(2)))
struct OriginCheckTests {
    struct Case: Sendable, CustomTestStringConvertible {
        var name: String
        var origin: String?
        /// The `Host` header; `{port}` is the server's port.
        var host = "127.0.0.1:{port}"
        var allowed: [String] = []
        var passes: Bool
        var testDescription: String { self.name }
    }

    static let cases: [Case] = [
        Case(name: "no Origin (not a browser)", origin: nil, passes: true),
        Case(name: "same origin", origin: "http://127.0.0.1:{port}", passes: true),
        Case(
            name: "same host and port over https (TLS ended by a proxy)",
            origin: "https://127.0.0.1:{port}",
            passes: true
        ),
        Case(name: "other scheme", origin: "ftp://127.0.0.1:{port}", passes: false),
        Case(name: "other port", origin: "http://127.0.0.1:1", passes: false),
        Case(name: "no port (another origin than the Host's)", origin: "http://127.0.0.1", passes: false),
        Case(name: "other host", origin: "https://evil.example", passes: false),
        Case(name: "other host on the same port", origin: "http://evil.example:{port}", passes: false),
        Case(name: "null (sandboxed frame, file)", origin: "null", passes: false),
        Case(name: "not an origin", origin: "evil", passes: false),
        Case(
            name: "host-named server, same origin",
            origin: "https://sg.example.com",
            host: "sg.example.com",
            passes: true
        ),
        Case(
            name: "default port written in Host",
            origin: "https://sg.example.com",
            host: "sg.example.com:443",
            passes: true
        ),
        Case(name: "case differs", origin: "HTTPS://SG.Example.COM", host: "sg.example.com", passes: true),
        Case(name: "trailing dot", origin: "https://sg.example.com.", host: "sg.example.com", passes: true),
        Case(
            name: "punycode (as browsers send it)",
            origin: "http://xn--bcher-kva.example:{port}",
            host: "xn--bcher-kva.example:{port}",
            passes: true
        ),
        Case(
            name: "IDN not in punycode",
            origin: "http://bücher.example:{port}",
            host: "xn--bcher-kva.example:{port}",
            passes: false
        ),
        Case(
            name: "exact origin allowed",
            origin: "https://app.example.com",
            allowed: ["https://app.example.com"],
            passes: true
        ),
        Case(
            name: "exact origin, other scheme",
            origin: "http://app.example.com",
            allowed: ["https://app.example.com"],
            passes: false
        ),
        Case(
            name: "host pattern hit",
            origin: "https://a.b.example.com:8443",
            allowed: ["*.example.com"],
            passes: true
        ),
        Case(
            name: "host pattern miss (the domain itself)",
            origin: "https://example.com",
            allowed: ["*.example.com"],
            passes: false
        ),
        Case(
            name: "host pattern miss (a suffix lookalike)",
            origin: "https://evilexample.com",
            allowed: ["*.example.com"],
            passes: false
        ),
        Case(
            name: "pattern with a port, hit",
            origin: "https://app.example.com:8443",
            allowed: ["app.example.com:8443"],
            passes: true
        ),
        Case(
            name: "pattern with a port, miss",
            origin: "https://app.example.com:9443",
            allowed: ["app.example.com:8443"],
            passes: false
        ),
        Case(
            name: "pattern with a scheme",
            origin: "https://x.example.com",
            allowed: ["https://*.example.com"],
            passes: true
        ),
        Case(
            name: "pattern case and trailing dot",
            origin: "https://app.example.com",
            allowed: ["APP.Example.com."],
            passes: true
        ),
        Case(
            name: "punycode pattern",
            origin: "https://a.xn--bcher-kva.example",
            allowed: ["*.xn--bcher-kva.example"],
            passes: true
        ),
        Case(name: "* allows every site", origin: "https://evil.example", allowed: ["*"], passes: true),
        Case(name: "* allows null too", origin: "null", allowed: ["*"], passes: true),
    ]

    @Test("the rule, case by case", arguments: cases)
    func rule(_ row: Case) {
        let rule = OriginRule(allowedOrigins: row.allowed)
        let resolve = { (text: String) in text.replacingOccurrences(of: "{port}", with: "4985") }
        #expect(rule.allows(origin: row.origin.map(resolve), host: resolve(row.host)) == row.passes)
    }

    @Test("a live server with Basic authentication: each case, with and without credentials", arguments: cases)
    func liveServer(_ row: Case) async throws {
        var configuration = BLIPWebSocketServer.Configuration.forTests
        configuration.allowedOrigins = row.allowed
        try await withServer(configuration, upgradeHandler: Self.aliceOnly) { server in
            let resolve = { (text: String) in text.replacingOccurrences(of: "{port}", with: "\(server.port)") }
            for credentials in [true, false] {
                let status = try await Self.upgradeStatus(
                    port: server.port,
                    origin: row.origin.map(resolve),
                    host: resolve(row.host),
                    credentials: credentials
                )
                // The Origin check comes first: a refused page learns nothing of the credentials.
                let expected = row.passes ? (credentials ? 101 : 401) : 403
                #expect(status == expected, "credentials: \(credentials)")
            }
        }
    }

    static let aliceOnly: BLIPWebSocketServer.UpgradeHandler = { request in
        guard let login = request.basicCredentials, login.user == "alice", login.password == "pw" else {
            return .unauthorized(realm: "db")
        }
        return .accept(identity: login.user)
    }

    /// The status of an upgrade request written by hand (a browser's: `Origin`, `Host`, `Authorization`).
    static func upgradeStatus(port: Int, origin: String?, host: String, credentials: Bool) async throws -> Int {
        let client = try await RawTCPClient.connect(port: port, group: rawPeerEventLoops, tls: nil)
        defer { Task { await client.close() } }
        var fields = [
            "Host: \(host)", "Upgrade: websocket", "Connection: Upgrade", "Sec-WebSocket-Version: 13",
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==", "Sec-WebSocket-Protocol: BLIP_3+CBMobile_3",
        ]
        if let origin { fields.append("Origin: \(origin)") }
        if credentials { fields.append("Authorization: Basic \(Data("alice:pw".utf8).base64EncodedString())") }
        let request = "GET /db/_blipsync HTTP/1.1\r\n" + fields.map { $0 + "\r\n" }.joined() + "\r\n"
        try await client.send(Array(request.utf8))
        let head = try #require(await client.received(through: "\r\n\r\n", within: .seconds(60)))
        let statusLine = String(decoding: head, as: UTF8.self).prefix { $0 != "\r" }
        return Int(statusLine.split(separator: " ").dropFirst().first ?? "") ?? 0
    }
}
