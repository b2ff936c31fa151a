import BLIP
import BLIPTestSupport
import NIOConcurrencyHelpers
import NIOCore
import Testing

/// A handler that answers and closes in one step (`BLIPRequestContext.closeAfterReply(code:reason:)`): its
/// reply arrives, then the close; nothing queued behind it is answered, and every pending request fails once
/// with the close status.
@Suite("Close right after a reply", .timeLimit(.minutes(2)))
struct CloseAfterReplyTests {
    /// A serial router: `rev` answers with its `Seq`; the one whose `Seq` is `expireAt` ends the session.
    static func router(expireAt: Int, noReply: Bool = false) -> BLIPRouter {
        var router = BLIPRouter(handlerOrder: .serial)
        router.register(profile: "rev") { request, context in
            let seq = Int(request.properties["Seq"] ?? "") ?? -1
            if seq == expireAt {
                context.closeAfterReply(code: BLIPCloseCode(rawValue: 4001), reason: "session expired")
            }
            return BLIPResponse(text: "\(seq)")
        }
        return router
    }

    /// How each request ended: its reply's text, or the close status its error carried.
    enum Outcome: Equatable {
        case reply(String)
        case closed(BLIPCloseStatus.Initiator, UInt16, String)
        case other(String)
    }

    static func outcome(_ result: Result<BLIPResponse, any Error>) -> Outcome {
        switch result {
        case .success(let reply): return .reply(String(buffer: reply.body))
        case .failure(let error as BLIPConnectionError):
            guard let status = error.closeStatus else { return .other("\(error)") }
            return .closed(status.initiator, status.code.rawValue, status.reason)
        case .failure(let error): return .other("\(error)")
        }
    }

    /// Runs `body` on a client of `peers`, which the server closes (4001) meanwhile: the scoped session then
    /// throws that close, which is checked here; `body` records what it saw in `outcomes`.
    static func runUntilClosed(
        _ peers: InMemoryPeers,
        clientRouter: BLIPRouter = BLIPRouter(),
        _ body: @Sendable @escaping (BLIPConnection, NIOLockedValueBox<[Outcome]>) async throws -> Void
    ) async throws -> [Outcome] {
        let outcomes = NIOLockedValueBox<[Outcome]>([])
        let error = await #expect(throws: BLIPConnectionError.self) {
            try await peers.run(clientRouter: clientRouter) { connection in
                try await body(connection, outcomes)
                // Stay until the close arrives (it ends this scope).
                try await Task.sleep(for: .seconds(60))
            }
        }
        #expect(error?.closeStatus?.code.rawValue == 4001 && error?.closeStatus?.initiator == .peer)
        return outcomes.withLockedValue { $0 }
    }

    @Test("20 requests queued: exactly the first is answered, the other 19 fail once with (peer, 4001, reason)")
    func firstOfTwenty() async throws {
        let peers = InMemoryPeers(router: Self.router(expireAt: 0))
        let outcomes = try await Self.runUntilClosed(peers) { connection, outcomes in
            let requests = (0..<20).map { BLIPRequest(profile: "rev", properties: ["Seq": "\($0)"]) }
            for await result in connection.sendRequests(requests, maximumInFlight: 20) {
                outcomes.withLockedValue { $0.append(Self.outcome(result)) }
            }
        }
        #expect(outcomes.first == .reply("0"))
        #expect(
            Array(outcomes.dropFirst()) == Array(repeating: .closed(.peer, 4001, "session expired"), count: 19),
            "\(outcomes)"
        )
        let status = try #require(peers.serverConnection.closeStatus)
        #expect(status.initiator == .local && status.code.rawValue == 4001 && status.reason == "session expired")
    }

    @Test("300 revs with the session ending at the 200th: exactly 200 acknowledged", arguments: BLIPDialect.allCases)
    func expiresAtTheTwoHundredth(dialect: BLIPDialect) async throws {
        let peers = InMemoryPeers(dialect: dialect, router: Self.router(expireAt: 199))
        let outcomes = try await Self.runUntilClosed(peers) { connection, outcomes in
            let queued = (0..<300).map {
                connection.enqueueRequest(
                    BLIPRequest(profile: "rev", properties: ["Seq": "\($0)"], body: pattern(1_000))
                )
            }
            for request in queued {
                let outcome: Outcome
                do {
                    outcome = Self.outcome(.success(try await request.reply()))
                } catch {
                    outcome = Self.outcome(.failure(error))
                }
                outcomes.withLockedValue { $0.append(outcome) }
            }
        }
        #expect(Array(outcomes.prefix(200)) == (0..<200).map { .reply("\($0)") })
        #expect(Array(outcomes.dropFirst(200)) == Array(repeating: .closed(.peer, 4001, "session expired"), count: 100))
    }

    @Test("the server's own pending request fails with the local close status")
    func serverRequestsFailLocally() async throws {
        var router = Self.router(expireAt: 1)
        let serverRequest = NIOLockedValueBox<Outcome?>(nil)
        router.register(profile: "start") { _, context in
            // Asks the client something it never answers, then lets the client go on.
            let pending = context.connection.enqueueRequest(BLIPRequest(profile: "never"))
            Task {
                let result: Result<BLIPResponse, any Error>
                do { result = .success(try await pending.reply()) } catch { result = .failure(error) }
                serverRequest.withLockedValue { $0 = Self.outcome(result) }
            }
            return BLIPResponse()
        }
        var clientRouter = BLIPRouter()
        clientRouter.register(profile: "never") { _, _ in
            try await Task.sleep(for: .seconds(3_600))
            return BLIPResponse()
        }
        let peers = InMemoryPeers(router: router)
        let outcomes = try await Self.runUntilClosed(peers, clientRouter: clientRouter) { connection, outcomes in
            _ = try await connection.sendRequest(BLIPRequest(profile: "start"))
            let reply = try await connection.sendRequest(BLIPRequest(profile: "rev", properties: ["Seq": "1"]))
            outcomes.withLockedValue { $0.append(.reply(String(buffer: reply.body))) }
        }
        #expect(outcomes == [.reply("1")])
        for _ in 0..<500 where serverRequest.withLockedValue({ $0 }) == nil {
            try await Task.sleep(for: .milliseconds(10))
        }
        #expect(serverRequest.withLockedValue { $0 } == .closed(.local, 4001, "session expired"))
    }
}

/// Closes asked for in ways the plain case does not cover: a reply the engine holds until its request's last
/// frame, a streamed reply, and a call after the reply was queued.
@Suite("Close right after a reply: held, streamed and late replies", .timeLimit(.minutes(2)))
struct CloseAfterHeldReplyTests {
    @Test("a streaming handler that answers before its request ended: the reply arrives, then the close")
    func heldReply() async throws {
        var router = BLIPRouter()
        router.registerStreaming(profile: "early") { request, context in
            // Answers after the first piece, while the rest of the body is still coming.
            var iterator = request.body.makeAsyncIterator()
            _ = try await iterator.next()
            context.closeAfterReply(code: BLIPCloseCode(rawValue: 4002), reason: "enough")
            return BLIPResponse(text: "early")
        }
        let peers = InMemoryPeers(router: router)
        let reply = NIOLockedValueBox<String?>(nil)
        let error = await #expect(throws: BLIPConnectionError.self) {
            try await peers.run { connection in
                let response = try await connection.sendRequest(
                    BLIPRequest(profile: "early"),
                    body: ChunkedBody(total: 2 << 20, chunk: 64 << 10)
                )
                reply.withLockedValue { $0 = String(buffer: response.body) }
                try await Task.sleep(for: .seconds(60))
            }
        }
        #expect(reply.withLockedValue { $0 } == "early")
        #expect(error?.closeStatus?.code.rawValue == 4002 && error?.closeStatus?.initiator == .peer)
    }

    @Test("a streamed reply: its last piece, then the close")
    func streamedReply() async throws {
        var router = BLIPRouter()
        router.register(profile: "download") { _, context in
            context.closeAfterReply(code: BLIPCloseCode(rawValue: 4003), reason: "done")
            return BLIPResponse(bodyStream: ChunkedBody(total: 1 << 20, chunk: 100_003))
        }
        let peers = InMemoryPeers(router: router)
        let received = NIOLockedValueBox(0)
        let error = await #expect(throws: BLIPConnectionError.self) {
            try await peers.run { connection in
                let response = try await connection.sendRequest(BLIPRequest(profile: "download"))
                received.withLockedValue { $0 = response.body.readableBytes }
                try await Task.sleep(for: .seconds(60))
            }
        }
        #expect(received.withLockedValue { $0 } == 1 << 20)
        #expect(error?.closeStatus?.code.rawValue == 4003)
    }

    @Test("asked for after the reply was queued (from a task the handler left behind): the close happens at once")
    func askedLate() async throws {
        var router = BLIPRouter()
        router.register(profile: "late") { _, context in
            Task {
                try await Task.sleep(for: .milliseconds(50))
                context.closeAfterReply(code: BLIPCloseCode(rawValue: 4004), reason: "late")
            }
            return BLIPResponse(text: "answered")
        }
        let peers = InMemoryPeers(router: router)
        let error = await #expect(throws: BLIPConnectionError.self) {
            try await peers.run { connection in
                let response = try await connection.sendRequest(BLIPRequest(profile: "late"))
                #expect(String(buffer: response.body) == "answered")
                try await Task.sleep(for: .seconds(60))
            }
        }
        #expect(error?.closeStatus?.code.rawValue == 4004)
    }
}
