import BLIP
import BLIPWebSocket
import Foundation
import Testing

/// The samples of the BLIPWebSocket catalog's articles, each run against a server on a free loopback port.
@Suite("Samples of the BLIPWebSocket articles", .timeLimit(.minutes(1)))
struct WebSocketArticleSamples {
    /// Runs `body` with a server answering with `router` (and `upgradeHandler`) on a free port.
    static func withServer<T: Sendable>(
        router: BLIPRouter = echoRouter(),
        upgradeHandler: BLIPWebSocketServer.UpgradeHandler? = nil,
        _ body: (Int) async throws -> T
    ) async throws -> T {
        var configuration = BLIPWebSocketServer.Configuration()
        configuration.port = 0
        let server = try await BLIPWebSocketServer.bind(
            configuration: configuration,
            router: router,
            upgradeHandler: upgradeHandler
        )
        let running = Task { await server.run() }
        defer { running.cancel() }
        do {
            let result = try await body(server.port)
            await server.close()
            return result
        } catch {
            await server.close()
            throw error
        }
    }

    @Test("Dialects.md: the subprotocols offered and accepted")
    func dialects() async throws {
        // sample: BLIPWebSocket.docc/Dialects.md #1
        var client = BLIPWebSocketClient.Configuration()
        client.subprotocols = [BLIPSubprotocol.blip3(application: "MyApp"), BLIPSubprotocol.blip2]

        var server = BLIPWebSocketServer.Configuration()
        server.subprotocols = [BLIPSubprotocol.blip3(application: "MyApp"), BLIPSubprotocol.blip2]
        // end sample
        #expect(server.subprotocols.first == "BLIP_3+MyApp")
        // sample: BLIPWebSocket.docc/Dialects.md #2
        client.subprotocols = [BLIPSubprotocol.couchbaseMobile4] + BLIPSubprotocol.couchbaseMobileDefaults
        // end sample
        client.heartbeatInterval = nil
        let chosen = try await Self.withServer { port in
            try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:\(port)/", configuration: client) { connection in
                connection.handshakeResponse?.subprotocol
            }
        }
        #expect(chosen == BLIPSubprotocol.couchbaseMobile4)
    }

    @Test("WritingAClient.md: a connection for the length of a closure, credentials as a value")
    func connectingAClient() async throws {
        let seen = Outcome()
        var router = BLIPRouter()
        router.register(profile: "getCheckpoint") { request, context in
            let answer = "\(context.identity(as: String.self) ?? "-") \(request.properties["client"] ?? "-")"
            seen.set(answer)
            return BLIPResponse(text: answer)
        }
        let login: BLIPWebSocketServer.UpgradeHandler = { request in
            guard let login = request.basicCredentials else { return .accept(identity: "anyone") }
            return login.password == "s3cret:with/odd@characters" ? .accept(identity: login.user) : .forbidden("no")
        }
        try await Self.withServer(router: router, upgradeHandler: login) { port in
            let url = "ws://127.0.0.1:\(port)/db/_blipsync"
            // sample: BLIPWebSocket.docc/WritingAClient.md #1
            var configuration = BLIPWebSocketClient.Configuration()
            configuration.subprotocols = [BLIPSubprotocol.blip3(application: "CBMobile_3")]

            let checkpoint = try await BLIPWebSocketClient.connect(to: url, configuration: configuration) {
                connection in
                try await connection.sendRequest(BLIPRequest(profile: "getCheckpoint", properties: ["client": "app-1"]))
            }
            // end sample
            #expect(checkpoint.text == "anyone app-1")
        }
        try await Self.withServer(router: router, upgradeHandler: login) { port in
            let url = URL(string: "ws://127.0.0.1:\(port)/db/_blipsync")!
            // sample: BLIPWebSocket.docc/WritingAClient.md #3
            var configuration = BLIPWebSocketClient.Configuration()
            configuration.credentials = .basic(user: "alice", password: "s3cret:with/odd@characters")
            // or .bearer(idToken), or .cookie(name: "SyncGatewaySession", value: session)
            try await BLIPWebSocketClient.connect(to: url, configuration: configuration) { connection in
                _ = try await connection.sendRequest(BLIPRequest(profile: "getCheckpoint"))
            }
            // end sample
            #expect(seen.value == "alice -")
        }
    }

    @Test("StayingConnected.md: a session that subscribes on each connection, stopped by cancelling its task")
    func stayingConnected() async throws {
        let subscribed = AsyncStream.makeStream(of: String.self)
        var router = BLIPRouter()
        router.register(profile: "subChanges") { request, _ in
            subscribed.continuation.yield(request.properties["continuous"] ?? "-")
            return BLIPResponse()
        }
        try await Self.withServer(router: router) { port in
            let url = "ws://127.0.0.1:\(port)/db/_blipsync"
            let running = Task {
                // sample: BLIPWebSocket.docc/StayingConnected.md #1
                var configuration = BLIPSession.Configuration()
                configuration.client.subprotocols = [BLIPSubprotocol.blip3(application: "CBMobile_3")]
                configuration.retry = .continuous
                let session = BLIPSession(url: url, configuration: configuration)
                Task { for await state in session.states { print(state) } }
                try await session.run { connection in
                    _ = try await connection.sendRequest(
                        BLIPRequest(profile: "subChanges", properties: ["continuous": "true"])
                    )
                }
                // end sample
            }
            var subscriptions = subscribed.stream.makeAsyncIterator()
            #expect(await subscriptions.next() == "true")
            running.cancel()
            let ended = await running.result
            #expect(throws: CancellationError.self) { try ended.get() }
        }
    }

    @Test("WritingAClient.md: a timed request, the 101's cookies, refusals by code, a proxy")
    func writingAClient() async throws {
        var router = BLIPRouter()
        router.register(profile: "getCheckpoint") { _, _ in BLIPResponse(text: "{}") }
        try await withPeer(router: router) { connection in
            // sample: BLIPWebSocket.docc/WritingAClient.md #2
            let reply = try await connection.sendRequest(BLIPRequest(profile: "getCheckpoint"), timeout: .seconds(10))
            // end sample
            #expect(reply.text == "{}")
        }
        let cookieServer: BLIPWebSocketServer.UpgradeHandler = { request in
            request.basicCredentials == nil
                ? .unauthorized(realm: "db") : .accept(identity: nil, headers: [.setCookie: "SyncGatewaySession=s1"])
        }
        try await Self.withServer(upgradeHandler: cookieServer) { port in
            let url = "ws://127.0.0.1:\(port)/db/_blipsync"
            var configuration = BLIPWebSocketClient.Configuration()
            configuration.credentials = .basic(user: "alice", password: "pw")
            // sample: BLIPWebSocket.docc/WritingAClient.md #4
            try await BLIPWebSocketClient.connect(to: url, configuration: configuration) { connection in
                let cookies = connection.handshakeResponse?.headers[values: .setCookie] ?? []
                print(cookies)  // every Set-Cookie, in order
            }
            // end sample
            configuration.credentials = nil
            // sample: BLIPWebSocket.docc/WritingAClient.md #5
            do {
                try await BLIPWebSocketClient.connect(to: url) { _ in }
            } catch let error as BLIPHandshakeError {
                switch error.code {
                case .unauthorized:
                    print("log in first:", error.challenges.map(\.scheme))  // parsed WWW-Authenticate
                case .rateLimited:
                    try await Task.sleep(for: error.retryAfter ?? .seconds(30))
                case .subprotocolRefused:
                    print("the server speaks none of", configuration.subprotocols, error.detail ?? "")
                default:
                    print(error.status, error.bodyText, error.isTransient ? "(try again later)" : "")
                }
            }
            // end sample
        }
        // sample: BLIPWebSocket.docc/WritingAClient.md #6
        var configuration = BLIPWebSocketClient.Configuration()
        configuration.proxy = BLIPProxy(url: "http://alice:secret@proxy.example:3128")
        // or .socks5(host: "proxy.example", port: 1080, username: "alice", password: "secret")
        // end sample
        #expect(configuration.proxy != nil)
    }

    @Test("WritingAServer.md: handlers that read the identity and close the connection")
    func writingAServer() async throws {
        struct User: Sendable {
            var name: String
            var db: String
        }
        var router = BLIPRouter()
        // sample: BLIPWebSocket.docc/WritingAServer.md #5
        router.register(profile: "whoami") { _, context in
            guard let user = context.identity(as: User.self) else { throw BLIPError(code: .forbidden) }
            let agent = context.upgradeRequest?.userAgent ?? "?"
            return BLIPResponse(text: "\(user.name) on \(user.db), using \(agent)")
        }
        // end sample
        // sample: BLIPWebSocket.docc/WritingAServer.md #6
        router.register(profile: "logout") { _, context in
            let connection = context.connection
            Task { await connection.close(code: 4001, reason: "logged out") }  // the reply would never go out after it
            return BLIPResponse()
        }
        // end sample
        let accept: BLIPWebSocketServer.UpgradeHandler = { _ in .accept(identity: User(name: "alice", db: "db")) }
        var client = BLIPWebSocketClient.Configuration()
        client.heartbeatInterval = nil
        client.headers = [HTTPField.Name("User-Agent")!: "docs/1"]
        let ended = try await Self.withServer(router: router, upgradeHandler: accept) { port in
            await #expect(throws: BLIPConnectionError.self) {
                try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:\(port)/db", configuration: client) {
                    connection in
                    let who = try await connection.sendRequest(BLIPRequest(profile: "whoami"))
                    #expect(who.text == "alice on db, using docs/1")
                    _ = try await connection.sendRequest(BLIPRequest(profile: "logout"))
                    _ = await connection.closed()
                }
            }
        }
        #expect(ended?.closeStatus?.code == 4001)
    }
}
