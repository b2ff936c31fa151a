import BLIP
import BLIPHummingbird
import BLIPTestSupport
import BLIPWebSocket
import Hummingbird
import Logging
import NIOConcurrencyHelpers
import NIOCore
import ServiceLifecycle
import Testing

/// BLIP mounted on a Hummingbird router: beside a REST route, behind a Hummingbird middleware.
@Suite("BLIP on Hummingbird", .timeLimit(.minutes(2)))
struct HummingbirdMountTests {
    /// `GET /health` (open), and `/:db/_blipsync` behind `AliceOnly`, refusing the database `forbidden`.
    static func router(
        blip: BLIPRouter,
        configuration: BLIPEndpointConfiguration = BLIPEndpointConfiguration(),
        onConnection: (@Sendable (BLIPConnection) async throws -> Void)? = nil
    ) -> Router<SyncContext> {
        let router = Router(context: SyncContext.self)
        router.get("/health") { _, _ in "ok" }
        router.group().add(middleware: AliceOnly())
            .blip("/:db/_blipsync", router: blip, configuration: configuration) { _, context in
                guard let database = context.parameters.get("db"), database != "forbidden" else {
                    return .forbidden("not your database")
                }
                return .accept(
                    identity: SyncUser(name: context.user ?? "?", database: database),
                    headers: ["X-Sync-User": context.user ?? "?"]
                )
            } onConnection: { connection in
                try await onConnection?(connection)
            }
        return router
    }

    static func blipRouter() -> BLIPRouter {
        var router = BLIPRouter()
        router.register(profile: "echo") { request, _ in BLIPResponse(body: request.body) }
        router.register(profile: "whoami") { _, context in
            let user = context.identity(as: SyncUser.self)
            let parameters = context.connection.upgradeRequest?.pathParameters ?? [:]
            return BLIPResponse(text: "\(user?.name ?? "-")@\(user?.database ?? "-") \(parameters["db"] ?? "-")")
        }
        return router
    }

    @Test(
        "a REST route and a BLIP endpoint on one port; the middleware's user and the path reach BLIP handlers",
        arguments: [
            (["BLIP_3+CBMobile_3", "BLIP_3+CBMobile_2"], "BLIP_3+CBMobile_3", BLIPDialect.blip3),
            (["BLIP"], "BLIP", .blip2),
            // The client's order wins, as with go-blip.
            (["BLIP", "BLIP_3+CBMobile_3"], "BLIP", .blip2),
            (["BLIP_3+Unknown", "BLIP_3+CBMobile_2"], "BLIP_3+CBMobile_2", .blip3),
        ] as [([String], String, BLIPDialect)]
    )
    func restAndBLIP(offered: [String], chosen: String, dialect: BLIPDialect) async throws {
        try await HummingbirdServer.with(router: Self.router(blip: Self.blipRouter())) { server in
            let health = try await rawHTTP(
                port: server.port,
                "GET /health HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"
            )
            #expect(health.hasPrefix("HTTP/1.1 200 OK"))
            #expect(health.hasSuffix("\r\n\r\nok"))

            try await BLIPWebSocketClient.connect(
                to: server.url("/travel%20db/_blipsync"),
                configuration: clientConfiguration(subprotocols: offered)
            ) { connection in
                #expect(connection.dialect == dialect)
                #expect(connection.handshakeResponse?.subprotocol == chosen)
                #expect(connection.handshakeResponse?.headers.first("X-Sync-User") == "alice")
                let echo = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "hello"))
                #expect(String(buffer: echo.body) == "hello")
                let whoami = try await connection.sendRequest(BLIPRequest(profile: "whoami"))
                // Hummingbird's captures stay percent-encoded; the upgrade request's are decoded, as on the
                // standalone server.
                #expect(String(buffer: whoami.body) == "alice@travel%20db travel db")
                // Unknown profiles: BLIP/404 from the connection, as on the standalone server.
                await #expect(throws: BLIPError.self) {
                    try await connection.sendRequest(BLIPRequest(profile: "nope"))
                }
            }
        }
    }

    @Test("the mount's per-connection scope: a pushed feed arrives in order, the peer's close cancels the scope")
    func connectionScope() async throws {
        let cancelled = NIOLockedValueBox(false)
        let log = OrderLog()
        var clientRouter = BLIPRouter(handlerOrder: .serial)
        clientRouter.register(profile: "changes") { request, context in
            log.enter(request, context)
            log.leave()
            return BLIPResponse()
        }
        let router = Self.router(blip: Self.blipRouter()) { connection in
            for seq in 0..<1_000 {
                try await connection.sendNoReply(BLIPRequest(profile: "changes", properties: ["Seq": "\(seq)"]))
            }
            do {
                try await Task.sleep(for: .seconds(3_600))
            } catch {
                cancelled.withLockedValue { $0 = true }
                throw error
            }
        }
        try await HummingbirdServer.with(router: router) { [clientRouter] server in
            try await BLIPWebSocketClient.connect(
                to: server.url("/db/_blipsync"),
                configuration: clientConfiguration(subprotocols: ["BLIP_3+CBMobile_3"]),
                router: clientRouter
            ) { _ in
                for _ in 0..<3_000 where log.sequence.count < 1_000 { try await Task.sleep(for: .milliseconds(10)) }
            }
            for _ in 0..<500 where !cancelled.withLockedValue({ $0 }) { try await Task.sleep(for: .milliseconds(10)) }
        }
        #expect(log.sequence == Array(0..<1_000))
        #expect(cancelled.withLockedValue { $0 }, "the scope was not cancelled by the client's close")
    }

    @Test("refusals reach the client as Hummingbird wrote them: 401 from the middleware, 403, 404, 500")
    func refusals() async throws {
        try await HummingbirdServer.with(router: Self.router(blip: Self.blipRouter())) { server in
            // The middleware's 401: its status, its challenge, its message.
            let unauthorized = await Self.handshakeError {
                try await BLIPWebSocketClient.connect(
                    to: server.url("/db/_blipsync"),
                    configuration: clientConfiguration(user: nil)
                ) { _ in }
            }
            #expect(unauthorized?.code == .unauthorized)
            #expect(unauthorized?.status == 401)
            #expect(unauthorized?.headers.first("WWW-Authenticate") == "Basic realm=\"sync\"")
            let challenge = String(decoding: unauthorized?.body ?? [], as: UTF8.self)
            #expect(challenge.contains("who are you?"), "body: \(challenge)")

            let wrongPassword = await Self.handshakeError {
                try await BLIPWebSocketClient.connect(
                    to: server.url("/db/_blipsync"),
                    configuration: clientConfiguration(password: "guess")
                ) { _ in }
            }
            #expect(wrongPassword?.status == 401)

            // The route's own decision.
            let forbidden = await Self.handshakeError {
                try await BLIPWebSocketClient.connect(
                    to: server.url("/forbidden/_blipsync"),
                    configuration: clientConfiguration()
                ) { _ in }
            }
            #expect(forbidden?.code == .forbidden)
            #expect(String(decoding: forbidden?.body ?? [], as: UTF8.self) == "not your database")

            // No route: the router's 404.
            let missing = await Self.handshakeError {
                try await BLIPWebSocketClient.connect(
                    to: server.url("/db/nothing"),
                    configuration: clientConfiguration()
                ) { _ in }
            }
            #expect(missing?.code == .notFound)

            // No subprotocol in common: go-blip's 500, which the client recognises.
            let refused = await Self.handshakeError {
                try await BLIPWebSocketClient.connect(
                    to: server.url("/db/_blipsync"),
                    configuration: clientConfiguration(subprotocols: ["BLIP_3+Other"])
                ) { _ in }
            }
            #expect(refused?.code == .subprotocolRefused)
            #expect(refused?.status == 500)

            // A plain GET on the endpoint: 426, and the connection is still served as HTTP.
            let plain = try await rawHTTP(
                port: server.port,
                "GET /db/_blipsync HTTP/1.1\r\nHost: localhost\r\nAuthorization: Basic YWxpY2U6c2VjcmV0\r\n"
                    + "Connection: close\r\n\r\n"
            )
            #expect(plain.hasPrefix("HTTP/1.1 426 "))
        }
    }

    @Test("concurrent refusals: each client gets its own answer, and the server still accepts afterwards")
    func concurrentRefusals() async throws {
        try await HummingbirdServer.with(router: Self.router(blip: Self.blipRouter())) { server in
            let answers = await withTaskGroup(of: [Int?].self) { group in
                for lane in 0..<8 {
                    group.addTask {
                        var statuses: [Int?] = []
                        for attempt in 0..<25 {
                            // Alternate the route's 403 and the 500 of no subprotocol in common.
                            let forbidden = (lane + attempt).isMultiple(of: 2)
                            let error = await Self.handshakeError {
                                try await BLIPWebSocketClient.connect(
                                    to: server.url(forbidden ? "/forbidden/_blipsync" : "/db/_blipsync"),
                                    configuration: clientConfiguration(
                                        subprotocols: forbidden ? ["BLIP_3+CBMobile_3"] : ["BLIP_3+Other"]
                                    )
                                ) { _ in }
                            }
                            let expected = forbidden ? 403 : 500
                            statuses.append(error?.status == expected ? expected : error?.status)
                        }
                        return statuses
                    }
                }
                return await group.reduce(into: []) { $0 += $1 }
            }
            #expect(answers.count == 200)
            #expect(answers.filter { $0 == 403 }.count == 100, "\(answers)")
            #expect(answers.filter { $0 == 500 }.count == 100, "\(answers)")
            try await BLIPWebSocketClient.connect(to: server.url("/db/_blipsync"), configuration: clientConfiguration())
            { connection in
                let echo = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "still here"))
                #expect(String(buffer: echo.body) == "still here")
            }
        }
    }

    @Test("a server whose handler does not read holds the client back (flow control through the mount)")
    func flowControl() async throws {
        let gate = Gate()
        let received = NIOLockedValueBox(0)
        var blip = Self.blipRouter()
        blip.registerStreaming(profile: "upload") { request, _ in
            await gate.wait()
            var total = 0
            for try await piece in request.body { total += piece.readableBytes }
            received.withLockedValue { $0 = total }
            return BLIPResponse(properties: ["Count": "\(total)"])
        }
        var configuration = BLIPEndpointConfiguration()
        configuration.connection.incomingBufferBudget = 1 << 20
        configuration.connection.incomingBufferHardLimit = 64 << 20
        let serverConnection = NIOLockedValueBox<BLIPConnection?>(nil)
        let router = Self.router(blip: blip, configuration: configuration) { connection in
            serverConnection.withLockedValue { $0 = connection }
        }
        let size = 32 << 20
        try await HummingbirdServer.with(router: router) { server in
            try await BLIPWebSocketClient.connect(to: server.url("/db/_blipsync"), configuration: clientConfiguration())
            { connection in
                let upload = Task {
                    try await connection.sendRequest(
                        BLIPRequest(profile: "upload", body: ByteBuffer(repeating: 1, count: size))
                    )
                }
                // Wait until the client has sent nothing new for half a second (20 s at most).
                var last = -1
                var quietRounds = 0
                for _ in 0..<400 where quietRounds < 10 {
                    try await Task.sleep(for: .milliseconds(50))
                    let sent = connection.statistics.bytesSent
                    quietRounds = sent == last ? quietRounds + 1 : 0
                    last = sent
                }
                let held = connection.statistics.bytesSent
                #expect(held < 16 << 20, "the client sent \(held) of \(size) bytes to a handler that read none")
                let buffered = serverConnection.withLockedValue { $0 }?.statistics.peakBufferedIncomingBytes ?? 0
                #expect(buffered < 16 << 20, "the server buffered \(buffered) bytes")
                gate.open()
                let reply = try await upload.value
                #expect(reply.properties["Count"] == "\(size)")
            }
        }
        #expect(received.withLockedValue { $0 } == size)
    }

    @Test("the application's graceful shutdown: the request in flight is answered, new ones get 503, then 1001")
    func gracefulShutdown() async throws {
        let gate = Gate()
        var blip = Self.blipRouter()
        blip.register(profile: "slow") { _, _ in
            await gate.wait()
            return BLIPResponse(text: "finished")
        }
        var configuration = BLIPEndpointConfiguration()
        configuration.drainTimeout = .seconds(60)
        let reply = NIOLockedValueBox<String?>(nil)
        let ended = NIOLockedValueBox<BLIPConnectionError?>(nil)
        try await HummingbirdServer.with(router: Self.router(blip: blip, configuration: configuration)) { server in
            do {
                try await BLIPWebSocketClient.connect(
                    to: server.url("/db/_blipsync"),
                    configuration: clientConfiguration()
                ) { connection in
                    let slow = connection.enqueueRequest(BLIPRequest(profile: "slow"))
                    // Queued after `slow`, so answered after the server has it (frames are read in order).
                    _ = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "before"))
                    await server.group.triggerGracefulShutdown()
                    let refusal = try await eventuallyThrown(BLIPError.self) {
                        _ = try await connection.sendRequest(BLIPRequest(profile: "echo", text: "after"))
                    }
                    #expect(refusal?.code == .busy)
                    gate.open()
                    let answer = String(buffer: try await slow.reply().body)
                    reply.withLockedValue { $0 = answer }
                    try await Task.sleep(for: .seconds(60))  // until the server closes the session
                }
                Issue.record("the session ended without a close")
            } catch let error as BLIPConnectionError {
                ended.withLockedValue { $0 = error }
            }
        }
        #expect(reply.withLockedValue { $0 } == "finished")
        let status = ended.withLockedValue { $0 }?.closeStatus
        #expect(status?.code == .goingAway && status?.initiator == .peer)
    }

    /// What a failed connect threw, when it was a handshake refusal.
    static func handshakeError(_ connect: () async throws -> Void) async -> BLIPHandshakeError? {
        do {
            try await connect()
            Issue.record("the connection was accepted")
        } catch let error as BLIPHandshakeError {
            return error
        } catch {
            Issue.record("failed with \(error), not a handshake refusal")
        }
        return nil
    }
}
