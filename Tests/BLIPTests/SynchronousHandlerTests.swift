import BLIP
import NIOConcurrencyHelpers
import NIOCore
import Synchronization
import Testing

/// Handlers registered with `registerSynchronous` run where the request arrives, without a task, unless the
/// handler order or the handler limit makes them wait their turn.
@Suite("Synchronous handlers", .timeLimit(.minutes(5)))
struct SynchronousHandlerTests {
    /// Where each call of a synchronous handler ran.
    final class Calls: Sendable {
        let inTask = NIOLockedValueBox<[Bool]>([])
        let order = NIOLockedValueBox<[Int]>([])

        func record(_ request: BLIPRequest) {
            self.inTask.withLockedValue { $0.append(withUnsafeCurrentTask { $0 != nil }) }
            self.order.withLockedValue { $0.append(Int(request.properties["Seq"] ?? "") ?? -1) }
        }
    }

    @Test("it answers from the transport's own thread: no task runs it", arguments: BLIPDialect.allCases)
    func runsWithoutATask(dialect: BLIPDialect) async throws {
        let calls = Calls()
        var router = BLIPRouter()
        router.registerSynchronous(profile: "echo") { request, context in
            calls.record(request)
            #expect(context.expectsReply)
            return BLIPResponse(properties: ["Number": "\(context.requestNumber)"], body: request.body)
        }
        let peers = InMemoryPeers(dialect: dialect, router: router)
        try await peers.run { connection in
            for index in 0..<50 {
                let reply = try await connection.sendRequest(
                    BLIPRequest(profile: "echo", properties: ["Seq": "\(index)"], body: pattern(100 + index))
                )
                #expect(reply.body == pattern(100 + index))
                #expect(reply.properties["Number"] == "\(index + 1)")
            }
        }
        #expect(calls.inTask.withLockedValue { $0 } == Array(repeating: false, count: 50))
        #expect(calls.order.withLockedValue { $0 } == Array(0..<50))
    }

    @Test("a thrown BLIPError is the ERR reply; any other error is BLIP/501")
    func errors() async throws {
        struct Unexpected: Error {}
        var router = BLIPRouter()
        router.registerSynchronous(profile: "conflict") { _, _ in
            throw BLIPError(domain: .http, code: BLIPError.Code(rawValue: 409), message: "taken")
        }
        router.registerSynchronous(profile: "broken") { _, _ in throw Unexpected() }
        let peers = InMemoryPeers(router: router)
        try await peers.run { connection in
            let conflict = await #expect(throws: BLIPError.self) {
                try await connection.sendRequest(BLIPRequest(profile: "conflict"))
            }
            #expect(conflict?.code.rawValue == 409 && conflict?.message == "taken")
            let broken = await #expect(throws: BLIPError.self) {
                try await connection.sendRequest(BLIPRequest(profile: "broken"))
            }
            #expect(broken?.domain == .blip && broken?.code == .handlerFailed)
        }
    }

    @Test("no-reply requests run the handler and send nothing back")
    func noReply() async throws {
        let calls = Calls()
        var router = BLIPRouter()
        router.registerSynchronous(profile: "note") { request, context in
            calls.record(request)
            #expect(!context.expectsReply)
            return BLIPResponse(text: "never sent")
        }
        router.register(profile: "done") { _, _ in BLIPResponse() }
        let peers = InMemoryPeers(router: router)
        try await peers.run { connection in
            for index in 0..<20 {
                try await connection.sendNoReply(BLIPRequest(profile: "note", properties: ["Seq": "\(index)"]))
            }
            _ = try await connection.sendRequest(BLIPRequest(profile: "done"))
            // One frame came back: the reply to "done".
            #expect(connection.statistics.framesReceived == 1)
        }
        #expect(calls.order.withLockedValue { $0 } == Array(0..<20))
    }

    /// Serial order: a synchronous handler waits behind a slow async one, then runs in a task, in order.
    @Test("serial order: behind a running async handler it waits its turn, and order holds")
    func serialWaitsItsTurn() async throws {
        let calls = Calls()
        let release = NIOLockedValueBox(false)
        var router = BLIPRouter(handlerOrder: .serial)
        router.register(profile: "slow") { request, _ in
            // Released by the test; the bound (at least 120 s) only stops a hang. A shorter one let the
            // handlers end by themselves before a starved test saw the request they held back.
            for _ in 0..<24_000 where !release.withLockedValue({ $0 }) { try await Task.sleep(for: .milliseconds(5)) }
            calls.record(request)
            return BLIPResponse()
        }
        router.registerSynchronous(profile: "fast") { request, _ in
            calls.record(request)
            return BLIPResponse()
        }
        let peers = InMemoryPeers(router: router)
        try await peers.run { connection in
            try await connection.sendNoReply(BLIPRequest(profile: "slow", properties: ["Seq": "0"]))
            for index in 1...5 {
                try await connection.sendNoReply(BLIPRequest(profile: "fast", properties: ["Seq": "\(index)"]))
            }
            // Everything has arrived and waits behind the slow handler.
            for _ in 0..<12_000 where peers.serverConnection.statistics.requestsQueuedForHandler < 5 {
                try await Task.sleep(for: .milliseconds(5))
            }
            #expect(calls.order.withLockedValue { $0 }.isEmpty)
            release.withLockedValue { $0 = true }
            _ = try await connection.sendRequest(BLIPRequest(profile: "fast", properties: ["Seq": "6"]))
        }
        #expect(calls.order.withLockedValue { $0 } == Array(0...6))
        // The five that waited ran in a task, after the slow handler (the last may find the way clear or not).
        #expect(calls.inTask.withLockedValue { $0 }.prefix(6) == [true, true, true, true, true, true])
    }

    /// The echo is sent only once both holding handlers run: sent at once beside them (three `async let`s),
    /// it could reach the server first and find a slot free, which a loaded machine did (stress-ng beside
    /// the suite).
    @Test("with every handler slot taken, it waits for one like any handler, and is answered")
    func waitsForASlot() async throws {
        let release = NIOLockedValueBox(false)
        let holding = NIOLockedValueBox(0)
        var router = BLIPRouter()
        router.register(profile: "hold") { _, _ in
            holding.withLockedValue { $0 += 1 }
            // Released by the test; the bound (at least 120 s) only stops a hang. A shorter one let the
            // handlers end by themselves before a starved test saw the request they held back.
            for _ in 0..<24_000 where !release.withLockedValue({ $0 }) { try await Task.sleep(for: .milliseconds(5)) }
            return BLIPResponse(text: "held")
        }
        router.registerSynchronous(profile: "echo") { request, _ in BLIPResponse(body: request.body) }
        var configuration = BLIPConnection.Configuration()
        configuration.maximumConcurrentHandlers = 2
        let peers = InMemoryPeers(router: router, serverConfiguration: configuration)
        try await peers.run { connection in
            async let first = connection.sendRequest(BLIPRequest(profile: "hold"))
            async let second = connection.sendRequest(BLIPRequest(profile: "hold"))
            for _ in 0..<12_000 where holding.withLockedValue({ $0 }) < 2 {
                try await Task.sleep(for: .milliseconds(5))
            }
            #expect(holding.withLockedValue { $0 } == 2)
            async let echoed = connection.sendRequest(BLIPRequest(profile: "echo", text: "after"))
            for _ in 0..<12_000 where peers.serverConnection.statistics.requestsQueuedForHandler < 1 {
                try await Task.sleep(for: .milliseconds(5))
            }
            #expect(peers.serverConnection.statistics.requestsQueuedForHandler == 1)
            release.withLockedValue { $0 = true }
            #expect(try await String(buffer: echoed.body) == "after")
            #expect(try await [first, second].map { String(buffer: $0.body) } == ["held", "held"])
        }
    }

    @Test("its request's bytes stop counting against the buffer budget once it has answered")
    func releasesItsCharge() async throws {
        var router = BLIPRouter()
        router.registerSynchronous(profile: "echo") { request, _ in BLIPResponse(body: request.body) }
        var configuration = BLIPConnection.Configuration()
        configuration.incomingBufferBudget = 256 << 10
        let peers = InMemoryPeers(router: router, serverConfiguration: configuration)
        try await peers.run { connection in
            // 64 × 64 KiB: 16 times the budget, one after another.
            for _ in 0..<64 {
                let reply = try await connection.sendRequest(BLIPRequest(profile: "echo", body: pattern(64 << 10)))
                #expect(reply.body.readableBytes == 64 << 10)
            }
        }
        let statistics = peers.serverConnection.statistics
        #expect(statistics.bufferedIncomingBytes == 0)
        #expect(statistics.peakBufferedIncomingBytes <= 256 << 10)
    }
}
