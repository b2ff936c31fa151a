import BLIP
import BLIPWebSocket
import Testing

/// Bodies as text and JSON, credentials as values, with `import BLIP` and `import BLIPWebSocket` alone (this
/// file imports nothing else; `ByteBuffer` comes with BLIP).
@Suite("Typed bodies and credentials with the library's imports only", .timeLimit(.minutes(1)))
struct TypedBodyTests {
    struct Document: Codable, Equatable {
        var id: String
        var revision: Int
        var tags: [String]
    }

    /// Runs `body` against a server on a free loopback port whose upgrade handler passes the request's
    /// credentials to `accept`.
    static func withServer(
        router: BLIPRouter,
        accept: @escaping BLIPWebSocketServer.UpgradeHandler = { _ in .accept() },
        _ body: (Int) async throws -> Void
    ) async throws {
        var configuration = BLIPWebSocketServer.Configuration()
        configuration.port = 0
        let server = try await BLIPWebSocketServer.bind(
            configuration: configuration,
            router: router,
            upgradeHandler: accept
        )
        let running = Task { await server.run() }
        do {
            try await body(server.port)
        } catch {
            await server.close()
            await running.value
            throw error
        }
        await server.close()
        await running.value
    }

    @Test("a JSON request, a text reply and a JSON reply decoded into a Codable value")
    func jsonBothWays() async throws {
        var router = BLIPRouter()
        router.register(profile: "put") { request, _ in
            var document = try request.decode(Document.self)
            document.revision += 1
            return try BLIPResponse(properties: ["Rev": "\(document.revision)"], json: document)
        }
        router.register(profile: "count") { request, _ in
            BLIPResponse(text: "\(request.text.count) characters")
        }
        try await Self.withServer(router: router) { port in
            try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:\(port)/") { connection in
                let sent = Document(id: "doc-1", revision: 1, tags: ["a", "b"])
                let reply = try await connection.sendRequest(BLIPRequest(profile: "put", json: sent))
                #expect(reply.properties["Rev"] == "2")
                #expect(try reply.decode(Document.self) == Document(id: "doc-1", revision: 2, tags: ["a", "b"]))
                let counted = try await connection.sendRequest(BLIPRequest(profile: "count", text: "héllo"))
                #expect(counted.text == "5 characters")
                // A body that is not the JSON asked for throws DecodingError, not a crash.
                #expect(throws: DecodingError.self) { try counted.decode(Document.self) }
            }
        }
    }

    @Test("credentials as values: Basic, a bearer token and a session cookie reach the upgrade handler")
    func credentialsAsValues() async throws {
        let seen = Seen()
        try await Self.withServer(router: BLIPRouter()) { request in
            await seen.record(request)
            return .accept()
        } _: { port in
            let url = "ws://127.0.0.1:\(port)/db/_blipsync"
            for credentials: BLIPCredentials in [
                .basic(user: "alice", password: "p@ss:w/rd%"),
                .bearer("eyJ.token"),
                .cookie(name: "SyncGatewaySession", value: "c0ffee"),
            ] {
                var configuration = BLIPWebSocketClient.Configuration()
                configuration.credentials = credentials
                try await BLIPWebSocketClient.connect(to: url, configuration: configuration) { _ in }
            }
            // Configured credentials win over a user and password in the URL.
            var configuration = BLIPWebSocketClient.Configuration()
            configuration.credentials = .basic(user: "bob", password: "right")
            try await BLIPWebSocketClient.connect(
                to: "ws://bob:wrong@127.0.0.1:\(port)/db/_blipsync",
                configuration: configuration
            ) { _ in }
        }
        let requests = await seen.all
        try #require(requests.count == 4)
        #expect(requests[0].basic?.user == "alice" && requests[0].basic?.password == "p@ss:w/rd%")
        #expect(requests[1].bearer == "eyJ.token" && requests[1].basic == nil)
        #expect(requests[2].cookie == "c0ffee" && requests[2].bearer == nil)
        #expect(requests[3].basic?.user == "bob" && requests[3].basic?.password == "right")
        // Their descriptions never carry the secret.
        #expect("\(BLIPCredentials.basic(user: "alice", password: "s3cret"))" == "BLIPCredentials(Basic)")
        #expect("\(BLIPCredentials.cookie(name: "SyncGatewaySession", value: "c0ffee"))".contains("c0ffee") == false)
        var dumped = ""
        dump(BLIPCredentials.bearer("eyJ.secret"), to: &dumped)
        #expect(!dumped.contains("eyJ.secret"), "\(dumped)")
    }

    /// What the upgrade handler saw of each request's credentials.
    actor Seen {
        struct Request: Sendable {
            var basic: (user: String, password: String)?
            var bearer: String?
            var cookie: String?
        }

        private(set) var all: [Request] = []

        func record(_ request: BLIPUpgradeRequest) {
            self.all.append(
                Request(
                    basic: request.basicCredentials,
                    bearer: request.bearerToken,
                    cookie: request.cookie(named: "SyncGatewaySession")
                )
            )
        }
    }
}
