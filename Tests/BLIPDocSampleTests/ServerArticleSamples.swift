import BLIP
import BLIPWebSocket
import Logging
import ServiceLifecycle
import Testing
import UnixSignals

/// The samples of *Writing a server*: a server bound, run and closed, its per-connection scope, the upgrade
/// decisions with a login, a session cookie and a one-time token, and a service group.
@Suite("Samples of Writing a server", .timeLimit(.minutes(1)))
struct ServerArticleSamples {
    struct User: Sendable, Equatable {
        var name: String
        var db: String
    }

    /// The application's stores the upgrade samples ask.
    actor Databases {
        func exists(_ db: String) -> Bool { db == "db" }
    }

    actor Users {
        func check(_ user: String, _ password: String) -> Bool { user == "alice" && password == "s3cret" }
    }

    actor Sessions {
        private var open: [String: String] = [:]
        private var tokens: [String: String] = ["t-1": "bob"]

        func user(for session: String) -> String? { self.open[session] }
        func open(for user: String) -> String {
            let session = "s-\(self.open.count + 1)"
            self.open[session] = user
            return session
        }
        func redeem(_ token: String) -> String? { self.tokens.removeValue(forKey: token) }
    }

    @Test("#1: bound on a free port, run in a task, closed")
    func bindRunClose() async throws {
        // sample: BLIPWebSocket.docc/WritingAServer.md #1
        var router = BLIPRouter()
        router.register(profile: "echo") { request, _ in
            BLIPResponse(properties: request.properties, body: request.body)
        }

        var configuration = BLIPWebSocketServer.Configuration()
        configuration.port = 0  // any free port, read back as server.port (4985 by default)
        configuration.path = "/{db}/_blipsync"
        // configuration.host = "0.0.0.0" serves every interface (127.0.0.1 by default)

        let server = try await BLIPWebSocketServer.bind(configuration: configuration, router: router)
        let serving = Task { await server.run() }
        // ...
        await server.close()  // stop accepting, close every connection (1000)
        await serving.value  // run() has returned
        // end sample
        await #expect(throws: (any Error).self) {
            try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:\(server.port)/db/_blipsync") { _ in }
        }
    }

    @Test("#2: a feed pushed from each connection's own scope")
    func perConnectionScope() async throws {
        struct Change: Sendable { var json: String }
        @Sendable func changes(for request: BLIPUpgradeRequest) -> AsyncStream<Change> {
            let db = request.pathParameters["db"] ?? "?"
            return AsyncStream { continuation in
                for sequence in 1...3 { continuation.yield(Change(json: #"{"db":"\#(db)","seq":\#(sequence)}"#)) }
                continuation.finish()
            }
        }
        var configuration = BLIPWebSocketServer.Configuration()
        configuration.port = 0
        configuration.path = "/{db}/_blipsync"
        let server = try await BLIPWebSocketServer.bind(configuration: configuration)
        let running = Task {
            // sample: BLIPWebSocket.docc/WritingAServer.md #2
            await server.run { accepted in
                let connection = accepted.connection
                for try await change in changes(for: accepted.upgradeRequest) {  // ends when the connection closes
                    try await connection.sendNoReply(BLIPRequest(profile: "changes", text: change.json))
                }
            }
            // end sample
        }
        let received = AsyncStream.makeStream(of: String.self)
        // Serial: the feed's order is what is checked, and concurrent handlers may start out of order.
        var client = BLIPRouter(handlerOrder: .serial)
        client.register(profile: "changes") { request, _ in
            received.continuation.yield(request.text)
            return BLIPResponse()
        }
        try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:\(server.port)/db/_blipsync", router: client) { _ in
            var changes = received.stream.makeAsyncIterator()
            for sequence in 1...3 { #expect(await changes.next() == #"{"db":"db","seq":\#(sequence)}"#) }
        }
        await server.close()
        await running.value
    }

    @Test("#3, #4: a login, a session cookie, a one-time token; refusals with 404 and 401")
    func upgradeDecisions() async throws {
        let databases = Databases()
        let users = Users()
        let sessions = Sessions()
        var router = BLIPRouter()
        router.register(profile: "whoami") { _, context in
            let user = context.identity(as: User.self)
            return BLIPResponse(text: user.map { "\($0.name)@\($0.db)" } ?? "-")
        }
        var configuration = BLIPWebSocketServer.Configuration()
        configuration.port = 0
        configuration.path = "/{db}/_blipsync"
        // sample: BLIPWebSocket.docc/WritingAServer.md #3
        let server = try await BLIPWebSocketServer.bind(configuration: configuration, router: router) { request in
            guard let db = request.pathParameters["db"], await databases.exists(db) else {
                return .notFound("no database here")
            }
            if let session = request.cookie(named: "SyncGatewaySession"), let user = await sessions.user(for: session) {
                return .accept(identity: User(name: user, db: db))
            }
            guard let login = request.basicCredentials, await users.check(login.user, login.password) else {
                return .unauthorized(realm: "Couchbase Sync Gateway")  // 401 with a Basic challenge
            }
            let session = await sessions.open(for: login.user)
            return .accept(
                identity: User(name: login.user, db: db),
                headers: [.setCookie: "SyncGatewaySession=\(session); Path=/\(db); HttpOnly"]
            )
        }
        // end sample
        let tokenServer = try await BLIPWebSocketServer.bind(configuration: configuration, router: router) { request in
            let db = request.pathParameters["db"] ?? "?"
            // sample: BLIPWebSocket.docc/WritingAServer.md #4
            if let token = request.sessionToken, let user = await sessions.redeem(token) {  // once only
                return .accept(identity: User(name: user, db: db))
            }
            // end sample
            return .unauthorized(realm: "db")
        }
        let serving = Task { await server.run() }
        let servingTokens = Task { await tokenServer.run() }
        defer {
            serving.cancel()
            servingTokens.cancel()
        }
        let url = "ws://127.0.0.1:\(server.port)/db/_blipsync"

        var login = BLIPWebSocketClient.Configuration()
        login.credentials = .basic(user: "alice", password: "s3cret")
        let (who, cookie) = try await BLIPWebSocketClient.connect(to: url, configuration: login) { connection in
            let who = try await connection.sendRequest(BLIPRequest(profile: "whoami")).text
            return (who, connection.handshakeResponse?.headers[values: .setCookie].first ?? "")
        }
        #expect(who == "alice@db")
        #expect(cookie == "SyncGatewaySession=s-1; Path=/db; HttpOnly")

        var returning = BLIPWebSocketClient.Configuration()
        returning.credentials = .cookie(name: "SyncGatewaySession", value: "s-1")
        let again = try await BLIPWebSocketClient.connect(to: url, configuration: returning) { connection in
            try await connection.sendRequest(BLIPRequest(profile: "whoami")).text
        }
        #expect(again == "alice@db")

        var wrong = BLIPWebSocketClient.Configuration()
        wrong.credentials = .basic(user: "alice", password: "guess")
        let refused = await #expect(throws: BLIPHandshakeError.self) {
            try await BLIPWebSocketClient.connect(to: url, configuration: wrong) { _ in }
        }
        #expect(refused?.code == .unauthorized)
        #expect(refused?.challenges.first?.scheme.lowercased() == "basic")
        let missing = await #expect(throws: BLIPHandshakeError.self) {
            try await BLIPWebSocketClient.connect(
                to: "ws://127.0.0.1:\(server.port)/nodb/_blipsync",
                configuration: login
            ) { _ in }
        }
        #expect(missing?.status == 404)

        var token = BLIPWebSocketClient.Configuration()
        token.subprotocols = BLIPSubprotocol.couchbaseMobileDefaults + [BLIPSubprotocol.sessionTokenPrefix + "t-1"]
        let tokenURL = "ws://127.0.0.1:\(tokenServer.port)/db/_blipsync"
        let bob = try await BLIPWebSocketClient.connect(to: tokenURL, configuration: token) { connection in
            try await connection.sendRequest(BLIPRequest(profile: "whoami")).text
        }
        #expect(bob == "bob@db")
        let spent = await #expect(throws: BLIPHandshakeError.self) {
            try await BLIPWebSocketClient.connect(to: tokenURL, configuration: token) { _ in }
        }
        #expect(spent?.code == .unauthorized)
        await server.close()
        await tokenServer.close()
    }

    @Test("#7: a service group runs the server; cancelling it closes every connection")
    func serviceGroup() async throws {
        var configuration = BLIPWebSocketServer.Configuration()
        configuration.port = 0
        let server = try await BLIPWebSocketServer.bind(configuration: configuration, router: echoRouter())
        let logger = Logger(label: "docs.service-group")
        let running = Task {
            // sample: BLIPWebSocket.docc/WritingAServer.md #7
            let group = ServiceGroup(
                services: [server],
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger
            )
            try await group.run()  // returns once every connection has closed
            // end sample
        }
        let closedWith = Outcome()
        do {
            try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:\(server.port)/") { connection in
                let reply = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "hi"))
                #expect(reply.text == "hi")
                running.cancel()
                closedWith.set("\(await connection.closed().code)")
            }
        } catch is BLIPConnectionError {}  // the server's close, reported by connect as well
        #expect(closedWith.value != nil)
        _ = await running.result
    }
}
