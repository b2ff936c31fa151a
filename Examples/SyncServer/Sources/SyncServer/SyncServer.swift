import BLIP
import BLIPHummingbird
import BLIPWebSocket
import Foundation
import Hummingbird
import Logging

/// `SyncServer [port]`: serves `GET /` and `GET /{db}` (REST) and `/{db}/_blipsync` (BLIP, users from
/// `SYNC_USERS`, `name:password` pairs separated by commas; `alice:secret` when unset), on 127.0.0.1.
@main
struct SyncServer {
    static func main() async throws {
        let port = CommandLine.arguments.dropFirst().first.flatMap(Int.init) ?? 4984
        let users = Users(ProcessInfo.processInfo.environment["SYNC_USERS"] ?? "alice:secret")
        let store = DocumentStore()

        let router = Router(context: SyncRequestContext.self)
        router.get("/") { _, _ in #"{"server":"swift-blip example sync server"}"# }
        router.get("/:db") { _, context in
            let database = try context.parameters.require("db")
            return #"{"db_name":"\#(database)","doc_count":\#(await store.count(in: database))}"#
        }
        router.group()
            .add(middleware: BasicAuthentication(users: users))
            .blip("/:db/_blipsync", router: SyncProfiles(store: store).router) { _, context in
                guard let user = context.user, let database = context.parameters.get("db") else {
                    return .unauthorized(realm: "sync")
                }
                return .accept(identity: SyncSession(user: user, database: database))
            }

        let app = Application(
            router: router,
            server: .http1BLIPUpgrade(blipRouter: router),
            configuration: ApplicationConfiguration(address: .hostname("127.0.0.1", port: port)),
            onServerRunning: { channel in
                print("listening on \(channel.localAddress?.port ?? port)")
            }
        )
        try await app.runService()  // until SIGTERM or SIGINT, which drain BLIP connections
    }
}

/// Hummingbird's request context plus the BLIP upgrade slot and the authenticated user.
struct SyncRequestContext: BLIPUpgradeRequestContext {
    var coreContext: CoreRequestContextStorage
    let blipUpgrade = BLIPUpgradeSlot()
    var user: String?

    init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
    }
}

/// Who a BLIP connection belongs to: every handler sees it as its context's identity.
struct SyncSession: Sendable {
    var user: String
    var database: String
}
