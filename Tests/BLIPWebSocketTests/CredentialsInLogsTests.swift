import BLIP
import BLIPTestSupport
import BLIPWebSocket
import Foundation
import Logging
import NIOConcurrencyHelpers
import NIOCore
import Testing

/// What the server learns about a client, and what it must never write down: the upgrade decision and the
/// connection see the client's User-Agent; a trace-level session whose client sends Basic credentials, a
/// cookie and a session token leaves none of the three in either side's log.
@Suite("User-Agent, and no credentials in logs", .timeLimit(.minutes(1)))
struct CredentialsInLogsTests {
    static let password = "pa55-Wörd-7f3a"
    static let cookie = "SyncGatewaySession=c00k1e-9b2e"
    static let token = "t0ken-51de"

    @Test("a trace-level session with credentials, a cookie and a token: none of them is logged")
    func nothingSecretLogged() async throws {
        let serverLogs = CapturingLogHandler.Store()
        let clientLogs = CapturingLogHandler.Store()
        let seen = UserAgents()
        var configuration = BLIPWebSocketServer.Configuration.forTests
        configuration.port = 0
        configuration.connection.logsMessageBodies = false
        let server = try await BLIPWebSocketServer.bind(
            configuration: configuration,
            router: standardRouter(),
            logger: serverLogs.logger(level: .trace)
        ) { request in
            seen.record(upgrade: request.userAgent)
            guard request.basicCredentials?.password == Self.password, request.sessionToken == Self.token,
                request.cookie(named: "SyncGatewaySession") == "c00k1e-9b2e"
            else { return .unauthorized(realm: "db") }
            return .accept(identity: "alice")
        }
        async let serving: Void = server.run { accepted in
            seen.record(connection: accepted.connection.upgradeRequest?.userAgent)
        }
        var client = BLIPWebSocketClient.Configuration()
        client.headers = ["Cookie": Self.cookie, "User-Agent": "CouchbaseLite/4.0.0 (Swift; test)"]
        client.sessionToken = Self.token
        try await BLIPWebSocketClient.connect(
            to:
                "ws://alice:\(Self.password.addingPercentEncoding(withAllowedCharacters: .alphanumerics)!)@127.0.0.1:\(server.port)/db/_blipsync",
            configuration: client,
            logger: clientLogs.logger(level: .trace)
        ) { connection in
            for index in 0..<5 {
                _ = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "request \(index)"))
            }
            await #expect(throws: BLIPError.self) { try await connection.sendRequest(BLIPRequest(profile: "error")) }
        }
        await server.close()
        await serving

        #expect(seen.upgrade == "CouchbaseLite/4.0.0 (Swift; test)")
        #expect(seen.connection == "CouchbaseLite/4.0.0 (Swift; test)")
        let basic = Data("alice:\(Self.password)".utf8).base64EncodedString()
        let secrets = [Self.password, basic, "c00k1e-9b2e", Self.token]
        for (side, store) in [("server", serverLogs), ("client", clientLogs)] {
            let entries = store.entries
            #expect(entries.count > 10, "\(side): the session was logged at trace level")
            for entry in entries {
                let line = "\(entry.message) \(entry.metadata)"
                for secret in secrets {
                    #expect(!line.contains(secret), "\(side) logged a secret: \(line)")
                }
            }
        }
    }
}

/// The User-Agent the upgrade decision and the connection saw.
final class UserAgents: Sendable {
    private let state = NIOLockedValueBox<(upgrade: String?, connection: String?)>((nil, nil))
    func record(upgrade: String?) { self.state.withLockedValue { $0.upgrade = upgrade } }
    func record(connection: String?) { self.state.withLockedValue { $0.connection = connection } }
    var upgrade: String? { self.state.withLockedValue { $0.upgrade } }
    var connection: String? { self.state.withLockedValue { $0.connection } }
}
