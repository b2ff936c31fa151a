import BLIP
import NIOCore
import Testing

@Suite("Requests and replies over the in-memory transport", .timeLimit(.minutes(3)))
struct RequestResponseTests {
    @Test("request and reply with properties and body, in every dialect", arguments: BLIPDialect.allCases)
    func echo(dialect: BLIPDialect) async throws {
        let peers = InMemoryPeers(dialect: dialect, router: standardRouter())
        try await peers.run { connection in
            #expect(connection.dialect == dialect)
            let reply = try await connection.sendRequest(
                BLIPRequest(profile: "echo", properties: ["X-Test": "1"], text: "Hello, BLIP!")
            )
            #expect(reply.properties["X-Test"] == "1" && reply.properties.profile == "echo")
            #expect(String(buffer: reply.body) == "Hello, BLIP!")
        }
    }

    @Test("large, compressed and urgent requests; many at once", arguments: BLIPDialect.allCases)
    func concurrent(dialect: BLIPDialect) async throws {
        let peers = InMemoryPeers(dialect: dialect, router: standardRouter())
        try await peers.run { connection in
            try await withThrowingTaskGroup(of: Void.self) { group in
                for index in 0..<60 {
                    group.addTask {
                        let size = index % 10 == 0 ? 300_000 : index * 37
                        let body = pattern(size)
                        let request = BLIPRequest(
                            profile: "echo",
                            properties: ["X-Index": "\(index)"],
                            body: body,
                            urgent: index % 3 == 0,
                            compressed: index % 2 == 0
                        )
                        let reply = try await connection.sendRequest(request)
                        #expect(reply.properties["X-Index"] == "\(index)")
                        #expect(reply.body == body)
                    }
                }
                try await group.waitForAll()
            }
        }
    }

    @Test("a request to a handler that calls back to the client over the same connection")
    func counterRequests() async throws {
        var serverRouter = BLIPRouter()
        serverRouter.register(profile: "ask-back") { request, context in
            let answer = try await context.connection.sendRequest(BLIPRequest(profile: "name"))
            return BLIPResponse(text: "hello, \(String(buffer: answer.body))")
        }
        var clientRouter = BLIPRouter()
        clientRouter.register(profile: "name") { _, _ in BLIPResponse(text: "client") }
        let peers = InMemoryPeers(router: serverRouter)
        try await peers.run(clientRouter: clientRouter) { connection in
            let reply = try await connection.sendRequest(BLIPRequest(profile: "ask-back"))
            #expect(String(buffer: reply.body) == "hello, client")
        }
    }
}

@Suite("Error replies", .timeLimit(.minutes(3)))
struct ErrorReplyTests {
    @Test(
        "a handler's BLIPError comes back with domain, code, message and extra properties",
        arguments: BLIPDialect.allCases
    )
    func handlerError(dialect: BLIPDialect) async throws {
        let peers = InMemoryPeers(dialect: dialect, router: standardRouter())
        try await peers.run { connection in
            let error = await #expect(throws: BLIPError.self) {
                try await connection.sendRequest(
                    BLIPRequest(profile: "error", properties: ["Want-Error-Domain": "Sim", "Want-Error-Code": "418"])
                )
            }
            #expect(error?.domain == "Sim" && error?.code.rawValue == 418)
            #expect(error?.message == "conflict")
            #expect(error?.properties["X-Extra"] == "yes")
        }
    }

    @Test("an unknown profile gets BLIP/404")
    func notFound() async throws {
        let peers = InMemoryPeers(router: standardRouter())
        try await peers.run { connection in
            await #expect(throws: BLIPError(domain: .blip, code: .notFound)) {
                try await connection.sendRequest(BLIPRequest(profile: "nope"))
            }
            // The connection is fine afterwards.
            _ = try await connection.sendRequest(BLIPRequest(profile: "echo"))
        }
    }

    struct Conflict: BLIPErrorConvertible {
        var blipError: BLIPError { BLIPError(domain: .http, code: 409, message: "exists") }
    }

    struct Internal: Error, CustomStringConvertible {
        var description: String { "secret detail" }
    }

    @Test("a thrown error becomes BLIP/501 without its text unless configured; convertible errors choose their reply")
    func thrownErrors() async throws {
        var router = BLIPRouter()
        router.register(profile: "convertible") { _, _ in throw Conflict() }
        router.register(profile: "internal") { _, _ in throw Internal() }
        for sendsMessages in [false, true] {
            var configuration = BLIPConnection.Configuration()
            configuration.sendsHandlerErrorMessages = sendsMessages
            let peers = InMemoryPeers(router: router, serverConfiguration: configuration)
            try await peers.run { connection in
                let conflict = await #expect(throws: BLIPError.self) {
                    try await connection.sendRequest(BLIPRequest(profile: "convertible"))
                }
                #expect(conflict == BLIPError(domain: .http, code: 409) && conflict?.message == "exists")
                let failed = await #expect(throws: BLIPError.self) {
                    try await connection.sendRequest(BLIPRequest(profile: "internal"))
                }
                #expect(failed?.code == .handlerFailed && failed?.domain == .blip)
                #expect(failed?.message.contains("secret") == sendsMessages)
            }
        }
    }

    @Test("an ERR without Error-Code reads as BLIP/599; Error-Code 0 too")
    func defaults() {
        #expect(BLIPError(errorReplyProperties: [:], body: ByteBuffer()).code == .unspecified)
        #expect(BLIPError(errorReplyProperties: ["Error-Code": "0"], body: ByteBuffer()) == BLIPError(code: 599))
        let wire = BLIPError(domain: .http, code: 404, properties: ["X": "1"]).errorReplyProperties
        #expect(wire.map(\.name) == ["Error-Domain", "Error-Code", "X"])
    }
}
