import BLIP
import BLIPHummingbird
import BLIPWebSocket
import Hummingbird
import Testing

/// A mount's `shouldUpgrade` reads credentials with the same helpers as the standalone server's upgrade
/// handler, through `BLIPUpgradeRequest(request)`.
@Suite("Credentials in a mount's shouldUpgrade", .timeLimit(.minutes(2)))
struct UpgradeCredentialsTests {
    @Test("a bearer token and Basic credentials given as values are read by shouldUpgrade; none gets 401")
    func bearerAndBasic() async throws {
        let router = Router(context: SyncContext.self)
        var blip = BLIPRouter()
        blip.register(profile: "whoami") { _, context in
            BLIPResponse(text: context.identity(as: String.self) ?? "-")
        }
        router.blip("/:db/_blipsync", router: blip) { request, context in
            let upgrade = BLIPUpgradeRequest(request, pathParameters: ["db": context.parameters.get("db") ?? ""])
            let database = upgrade.pathParameters["db"] ?? "-"
            if upgrade.bearerToken == "t0ken" { return .accept(identity: "token holder@\(database)") }
            if let login = upgrade.basicCredentials, login == ("bob", "p:w") {
                return .accept(identity: "\(login.user)@\(database)")
            }
            return .unauthorized(realm: "sync")
        }
        try await HummingbirdServer.with(router: router) { server in
            for (credentials, expected) in [
                (BLIPCredentials.bearer("t0ken"), "token holder@db"), (.basic(user: "bob", password: "p:w"), "bob@db"),
            ] {
                var configuration = clientConfiguration(user: nil)
                configuration.credentials = credentials
                let who = try await BLIPWebSocketClient.connect(
                    to: server.url("/db/_blipsync"),
                    configuration: configuration
                ) { connection in
                    try await connection.sendRequest(BLIPRequest(profile: "whoami")).text
                }
                #expect(who == expected)
            }
            var wrong = clientConfiguration(user: nil)
            wrong.credentials = .bearer("other")
            let refusal = await HummingbirdMountTests.handshakeError {
                try await BLIPWebSocketClient.connect(to: server.url("/db/_blipsync"), configuration: wrong) { _ in }
            }
            #expect(refusal?.code == .unauthorized && refusal?.status == 401)
        }
    }
}
