import BLIP
import BLIPTestSupport
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import Synchronization
import Testing

@testable import BLIPWebSocket

/// The acceptance test of what a sync client and server need around the protocol, played as Couchbase
/// Lite's replicator against a Sync Gateway-like server would, over a real loopback WebSocket.
@Suite("A replication-like session over loopback", .timeLimit(.minutes(3)))
struct ReplicationSessionTests {
    /// A loop of its own, as in ServerLimitsTests: the shared loops are busy in the full suite.
    static let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
    static let session = "a3f09c"
    static let attachmentSize = 64 << 20
    /// Not a multiple of 256, so that the bytes of neighbouring chunks differ.
    static let attachmentChunk = 100_003
    static let changesCount = 1_000

    /// Sync Gateway's rules, in short: a session cookie, or Basic credentials (answered with a cookie).
    static let upgradeHandler: BLIPWebSocketServer.UpgradeHandler = { request in
        guard request.pathParameters["db"] == "db" else { return .notFound("no such database") }
        if request.cookie(named: "SyncGatewaySession") == Self.session { return .accept(identity: "alice") }
        guard let credentials = request.basicCredentials else {
            return .unauthorized(realm: "Couchbase Sync Gateway", body: "{\"error\":\"Unauthorized\"}")
        }
        guard credentials == ("alice", "pa ss") else { return .unauthorized(realm: "Couchbase Sync Gateway") }
        return .accept(
            identity: "alice",
            headers: ["Set-Cookie": "SyncGatewaySession=\(Self.session); Path=/db/; HttpOnly"]
        )
    }

    static func serverRouter() -> BLIPRouter {
        var router = BLIPRouter()
        router.register(profile: "subChanges") { _, context in
            // Pushed in sequence order, one after the other, while the client's handlers keep up.
            for sequence in 1...Self.changesCount {
                try await context.connection.sendNoReply(
                    BLIPRequest(profile: "changes", properties: ["Sequence": "\(sequence)"], text: "[[\(sequence)]]")
                )
            }
            return BLIPResponse()
        }
        router.register(profile: "rev") { request, context in
            #expect(request.isCompressed)
            if request.properties["Slow"] != nil { try await Task.sleep(for: .seconds(3600)) }
            let user = context.identity(as: String.self) ?? "-"
            return BLIPResponse(properties: ["Stored-By": user, "Length": "\(request.body.readableBytes)"])
        }
        router.register(profile: "getAttachment") { _, _ in
            BLIPResponse(bodyStream: ChunkedBody(total: Self.attachmentSize, chunk: Self.attachmentChunk))
        }
        router.register(profile: "hold") { _, _ in
            try await Task.sleep(for: .seconds(3600))
            return BLIPResponse()
        }
        router.register(profile: "expire") { _, context in
            let connection = context.connection
            Task { await connection.close(code: 4001, reason: "session expired") }
            try await Task.sleep(for: .seconds(3600))
            return BLIPResponse()
        }
        return router
    }

    static var clientConfiguration: BLIPWebSocketClient.Configuration {
        var configuration = BLIPWebSocketClient.Configuration()
        configuration.heartbeatInterval = nil
        // Slowness is not what is tested: beside every other suite and stress-ng, a connect waited 10 s.
        configuration.connectTimeout = .seconds(60)
        return configuration
    }

    @Test("401, credentials, a session cookie, pushed changes in order, pipelined revs, a streamed attachment, 4001")
    func replicationSession() async throws {
        var serverConfiguration = BLIPWebSocketServer.Configuration.forTests
        serverConfiguration.path = "/{db}/_blipsync"
        try await withServer(
            serverConfiguration,
            router: Self.serverRouter(),
            eventLoopGroup: Self.group,
            upgradeHandler: Self.upgradeHandler
        ) { server in
            let url = "ws://127.0.0.1:\(server.port)/db/_blipsync"

            // 1. No credentials: a typed 401 with the Basic challenge.
            let refusal = await #expect(throws: BLIPHandshakeError.self) {
                try await BLIPWebSocketClient.connect(
                    to: url,
                    configuration: Self.clientConfiguration,
                    eventLoopGroup: Self.group
                ) { _ in }
            }
            #expect(refusal?.code == .unauthorized && refusal?.isTransient == false)
            #expect(refusal?.challenges.first?.scheme.lowercased() == "basic")
            #expect(refusal?.challenges.first?.parameters["realm"] == "Couchbase Sync Gateway")
            #expect(refusal?.bodyText == "{\"error\":\"Unauthorized\"}")

            // 2. Credentials in the URL (percent-encoded): accepted, with a session cookie in the 101.
            let credentialed = "ws://alice:pa%20ss@127.0.0.1:\(server.port)/db/_blipsync"
            let cookie = try await BLIPWebSocketClient.connect(
                to: credentialed,
                configuration: Self.clientConfiguration,
                eventLoopGroup: Self.group
            ) {
                connection in
                let response = try #require(connection.handshakeResponse)
                #expect(response.status == 101)
                return try #require(response.headers["Set-Cookie"].first)
            }
            #expect(cookie.hasPrefix("SyncGatewaySession=\(Self.session);"))
            let pair = String(cookie.prefix { $0 != ";" })

            // 3. The cookie alone: the replication itself.
            var configuration = Self.clientConfiguration
            configuration.headers = ["Cookie": pair]
            let changes = ChangesFeed()
            var clientRouter = BLIPRouter(handlerOrder: .serial)
            clientRouter.register(profile: "changes") { request, _ in
                changes.record(Int(request.properties["Sequence"] ?? "") ?? -1)
                return BLIPResponse()
            }
            let pending = PendingOutcomes()
            let error = await #expect(throws: BLIPConnectionError.self) {
                try await BLIPWebSocketClient.connect(
                    to: url,
                    configuration: configuration,
                    router: clientRouter,
                    eventLoopGroup: Self.group
                ) { connection in
                    try await Self.replicate(connection, changes: changes, pending: pending)
                }
            }
            // The session ended on its own, with the server's code; every pending request failed once with it.
            let status = try #require(error?.closeStatus)
            #expect(status.code == 4001 && status.reason == "session expired" && status.initiator == .peer)
            #expect(pending.all == Array(repeating: "peer 4001 session expired", count: 11), "\(pending.all)")
        }
    }

    /// Everything the replicator does on one connection, until the server ends it.
    static func replicate(_ connection: BLIPConnection, changes: ChangesFeed, pending: PendingOutcomes) async throws {
        // Pushed changes reach the serial handler in order.
        _ = try await connection.sendRequest(BLIPRequest(profile: "subChanges"))
        for _ in 0..<3_000 where changes.count < Self.changesCount { try await Task.sleep(for: .milliseconds(10)) }
        #expect(changes.all == Array(1...Self.changesCount))

        // 500 revs, 100 in flight, with compressed bodies.
        let stored = try await withThrowingTaskGroup(of: Bool.self) { group in
            var stored = 0
            for index in 0..<500 {
                if index >= 100, try await group.next() == true { stored += 1 }
                group.addTask {
                    let text = String(repeating: "lorem ", count: 300)
                    let body = "{\"_id\":\"doc\(index)\",\"_rev\":\"1-abc\",\"text\":\"\(text)\"}"
                    let reply = try await connection.sendRequest(
                        BLIPRequest(profile: "rev", properties: ["History": "1-abc"], text: body, compressed: true)
                    )
                    return reply.properties["Stored-By"] == "alice"
                        && reply.properties["Length"] == "\(body.utf8.count)"
                }
            }
            for try await ok in group where ok { stored += 1 }
            return stored
        }
        #expect(stored == 500)

        // One rev whose reply takes too long: its timeout fires.
        let slow = BLIPRequest(profile: "rev", properties: ["Slow": "1"], text: "{}", compressed: true)
        let timedOut = await #expect(throws: BLIPConnectionError.self) {
            try await connection.sendRequest(slow, timeout: .milliseconds(200))
        }
        #expect(timedOut?.code == .timedOut)
        // One the replicator gives up on.
        let abandoned = Task { try await connection.sendRequest(slow) }
        try await Task.sleep(for: .milliseconds(50))
        abandoned.cancel()
        await #expect(throws: CancellationError.self) { try await abandoned.value }

        // An attachment streamed in the reply, read as it arrives; progress follows it.
        let progress = NIOLockedValueBox(BLIPMessageProgress(state: .queued))
        let attachment = try await connection.sendRequestStreamingReply(BLIPRequest(profile: "getAttachment")) {
            update in progress.withLockedValue { $0 = update }
        }
        var received = 0
        var misplaced = 0
        for try await piece in attachment.body {
            // Each piece's first and last bytes are where ChunkedBody put them (bytes one by one are slow in
            // a debug build).
            if piece.readableBytes > 0,
                piece.readableBytesView.first != Self.attachmentByte(at: received)
                    || piece.readableBytesView.last != Self.attachmentByte(at: received + piece.readableBytes - 1)
            {
                misplaced += 1
            }
            received += piece.readableBytes
        }
        #expect(received == Self.attachmentSize && misplaced == 0)
        for _ in 0..<500 where !progress.withLockedValue({ $0.state.isFinal }) {
            try await Task.sleep(for: .milliseconds(10))
        }
        let final = progress.withLockedValue { $0 }
        #expect(final.state == .complete && final.replyBytesReceived == Self.attachmentSize, "\(final)")

        // Ten requests the server holds, then it expires the session: all eleven fail with its status.
        await withTaskGroup(of: Void.self) { group in
            for profile in Array(repeating: "hold", count: 10) + ["expire"] {
                group.addTask { await pending.send(BLIPRequest(profile: profile), over: connection) }
            }
        }
        // Waits for pushes that will never come: the close must end this.
        try await Task.sleep(for: .seconds(3600))
    }

    /// The byte ChunkedBody puts at `offset`: each chunk repeats the count of bytes left after it.
    static func attachmentByte(at offset: Int) -> UInt8 {
        let chunk = offset / Self.attachmentChunk
        return UInt8(truncatingIfNeeded: max(Self.attachmentSize - (chunk + 1) * Self.attachmentChunk, 0))
    }
}

/// The sequences the client's `changes` handler saw, in the order it saw them.
final class ChangesFeed: Sendable {
    private let sequences = NIOLockedValueBox<[Int]>([])
    var all: [Int] { self.sequences.withLockedValue { $0 } }
    var count: Int { self.sequences.withLockedValue { $0.count } }
    func record(_ sequence: Int) { self.sequences.withLockedValue { $0.append(sequence) } }
}

/// How each pending request ended, as "initiator code reason".
final class PendingOutcomes: Sendable {
    private let outcomes = NIOLockedValueBox<[String]>([])
    var all: [String] { self.outcomes.withLockedValue { $0 } }

    func send(_ request: BLIPRequest, over connection: BLIPConnection) async {
        let outcome: String
        do {
            _ = try await connection.sendRequest(request)
            outcome = "reply"
        } catch let error as BLIPConnectionError {
            let status = error.closeStatus
            outcome = "\(status?.initiator.description ?? "-") \(status?.code.rawValue ?? 0) \(status?.reason ?? "")"
        } catch {
            outcome = "other \(error)"
        }
        self.outcomes.withLockedValue { $0.append(outcome) }
    }
}
