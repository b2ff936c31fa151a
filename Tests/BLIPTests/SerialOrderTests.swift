import BLIP
import BLIPEngine
import BLIPTestSupport
import NIOConcurrencyHelpers
import NIOCore
import Synchronization
import Testing

/// `.serial` hands requests to their handlers in request-number order (the order they were sent), however
/// their frames interleaved: a large request sent first is handled first even though a small one sent after
/// it arrives whole before it.
@Suite("Serial order is send order", .timeLimit(.minutes(3)))
struct SerialOrderTests {
    @Test("a 4 MiB request and then a small one: handled in that order", arguments: BLIPDialect.allCases)
    func bigThenSmall(dialect: BLIPDialect) async throws {
        let log = OrderLog()
        let peers = InMemoryPeers(dialect: dialect, router: log.serialRouter())
        try await peers.run { connection in
            let replies = Replies()
            connection.sendRequest(
                BLIPRequest(profile: "record", properties: ["Seq": "0"], body: pattern(4 << 20)),
                onReply: replies.record
            )
            connection.sendRequest(BLIPRequest(profile: "record", properties: ["Seq": "1"]), onReply: replies.record)
            try await replies.wait(for: 2)
        }
        #expect(log.sequence == [0, 1])
        #expect(log.numbers == [1, 2])
    }

    @Test("200 requests of mixed sizes (0-300 KB) queued in order run in that order", arguments: BLIPDialect.allCases)
    func mixedSizes(dialect: BLIPDialect) async throws {
        let log = OrderLog()
        let peers = InMemoryPeers(dialect: dialect, router: log.serialRouter())
        var random = SeededRandom(seed: 200)
        let sizes = (0..<200).map { _ in Int(random.next() % 300_001) }
        let count = try await peers.run { connection in
            try await Self.sendInOrder(sizes: sizes, on: connection)
        }
        #expect(count == 200)
        #expect(log.sequence == Array(0..<200))
        #expect(log.numbers == log.numbers.sorted())
        #expect(log.mostAtOnce == 1)
    }

    /// Queues one request per size from this task with the callback API (numbers follow call order), and
    /// returns how many replies came.
    static func sendInOrder(sizes: [Int], on connection: BLIPConnection) async throws -> Int {
        let replies = Replies()
        for (index, size) in sizes.enumerated() {
            let request = BLIPRequest(profile: "record", properties: ["Seq": "\(index)"], body: pattern(size))
            connection.sendRequest(request, onReply: replies.record)
        }
        try await replies.wait(for: sizes.count)
        #expect(replies.failures == 0)
        return replies.count
    }

    @Test("no-reply, synchronous and streamed requests take their place in the order")
    func everyKindInOrder() async throws {
        let log = OrderLog()
        let peers = InMemoryPeers(router: log.serialRouter())
        try await peers.run { connection in
            let replies = Replies()
            connection.sendRequest(
                BLIPRequest(profile: "record", properties: ["Seq": "0"], body: pattern(2 << 20)),
                onReply: replies.record
            )
            // Queued while the first is still being sent: it arrives whole long before.
            try await connection.sendNoReply(BLIPRequest(profile: "record", properties: ["Seq": "1"]))
            connection.sendRequest(
                BLIPRequest(profile: "record-sync", properties: ["Seq": "2"]),
                onReply: replies.record
            )
            connection.sendRequest(
                BLIPRequest(profile: "record-stream", properties: ["Seq": "3"], body: pattern(10_000)),
                onReply: replies.record
            )
            connection.sendRequest(
                BLIPRequest(profile: "record", properties: ["Seq": "4"], body: pattern(300_000)),
                onReply: replies.record
            )
            connection.sendRequest(BLIPRequest(profile: "record", properties: ["Seq": "5"]), onReply: replies.record)
            try await replies.wait(for: 5)
            #expect(replies.failures == 0)
        }
        #expect(log.sequence == [0, 1, 2, 3, 4, 5])
    }

    @Test("a request whose properties straddle frames is handled before a later one that arrived whole first")
    func propertiesStraddlingFrames() async throws {
        let log = OrderLog()
        let transport = ManualTransport()
        let connection = BLIPConnection(transport: transport, router: log.serialRouter())
        let running = Task { await connection.run() }
        // The peer queues both before it sends anything: its out-box then sends #1's first frame, all of #2
        // (one frame), and the rest of #1, whose 60 KB of properties take four frames.
        let peer = ScriptedPeer(transport: transport)
        let large = String(repeating: "p", count: 60_000)
        for (seq, extra) in [("0", ["Large": large]), ("1", [:])] {
            var properties: BLIPProperties = ["Profile": "record", "Seq": seq]
            for (name, value) in extra { properties[name] = value }
            _ = try peer.engine.enqueue(
                BLIPOutgoingMessage(.request, properties: properties, body: .buffer(ByteBuffer()))
            )
        }
        try peer.flush()
        for _ in 0..<1_000 where log.sequence.count < 2 {
            try peer.receive()
            try await Task.sleep(for: .milliseconds(2))
        }
        #expect(log.sequence == [0, 1])
        await connection.close()
        _ = await running.value
    }

    @Test("requests refused or unhandled do not hold the order up")
    func settledRequestsLeaveTheOrder() async throws {
        let log = OrderLog()
        var configuration = BLIPConnection.Configuration()
        configuration.maximumIncomingMessageSize = 1 << 20
        let peers = InMemoryPeers(router: log.serialRouter(), serverConfiguration: configuration)
        try await peers.run { connection in
            let replies = Replies()
            // Too large: drained and answered 413 once complete.
            connection.sendRequest(
                BLIPRequest(profile: "record", properties: ["Seq": "0"], body: pattern(3 << 20)),
                onReply: replies.record
            )
            connection.sendRequest(BLIPRequest(profile: "nobody", properties: ["Seq": "1"]), onReply: replies.record)
            connection.sendRequest(BLIPRequest(profile: "record", properties: ["Seq": "2"]), onReply: replies.record)
            try await replies.wait(for: 3)
            #expect(replies.errorCodes.sorted() == [404, 413])
        }
        #expect(log.sequence == [2])
    }

    @Test("a 3 MiB request with 200 of 64 KB behind it and a 4 MiB budget: what waits is refused past the budget")
    func heldRequestsStayWithinTheBudget() async throws {
        let log = OrderLog()
        var configuration = BLIPConnection.Configuration()
        configuration.incomingBufferBudget = 4 << 20
        configuration.incomingBufferHardLimit = 8 << 20
        let peers = InMemoryPeers(router: log.serialRouter(), serverConfiguration: configuration)
        let (replied, busy, failed) = try await peers.run { connection in
            var outcomes = (0, 0, 0)
            let requests =
                [BLIPRequest(profile: "record", properties: ["Seq": "0"], body: pattern(3 << 20))]
                + (1...200).map { BLIPRequest(profile: "record", properties: ["Seq": "\($0)"], body: pattern(64_000)) }
            for await result in connection.sendRequests(requests, maximumInFlight: 201) {
                switch result {
                case .success: outcomes.0 += 1
                case .failure(let error as BLIPError) where error.code == .busy: outcomes.1 += 1
                case .failure: outcomes.2 += 1
                }
            }
            return outcomes
        }
        // Held past the budget, the later requests would leave no room for the first one to finish within
        // the hard limit: the connection would close (1008) and every request fail.
        #expect(failed == 0 && replied + busy == 201, "\(replied) replied, \(busy) busy, \(failed) failed")
        #expect(busy > 0)
        #expect(log.sequence.first == 0)
        #expect(log.numbers == log.numbers.sorted())
        #expect(peers.serverConnection.statistics.peakBufferedIncomingBytes <= configuration.incomingBufferHardLimit)
    }

    @Test(
        "10 000 requests of random sizes up to 1 MiB against a 4 MiB budget: in order, within the hard limit",
        .timeLimit(.minutes(5))
    )
    func budgetWithHeldRequests() async throws {
        let log = OrderLog()
        var configuration = BLIPConnection.Configuration()
        configuration.incomingBufferBudget = 4 << 20
        configuration.incomingBufferHardLimit = 8 << 20
        let peers = InMemoryPeers(router: log.serialRouter(), serverConfiguration: configuration)
        var random = SeededRandom(seed: 10_000)
        // Log-uniform over 1 B ... 1 MiB: every order of magnitude equally often (mostly small, as a
        // replicator's revisions are, with a long tail of large ones).
        let sizes = (0..<10_000).map { _ in Int((1 << 20) >> (random.next() % 21)) - Int(random.next() % 2) }
        let outcome = try await peers.run { connection in
            var replied = 0
            var busy = 0
            var failed = 0
            for await result in connection.sendRequests(
                sizes.enumerated().map {
                    BLIPRequest(profile: "record", properties: ["Seq": "\($0)"], body: pattern($1))
                },
                maximumInFlight: 32
            ) {
                switch result {
                case .success: replied += 1
                case .failure(let error as BLIPError) where error.code == .busy: busy += 1
                case .failure: failed += 1
                }
            }
            return (replied, busy, failed)
        }
        let statistics = peers.serverConnection.statistics
        #expect(outcome.0 + outcome.1 == 10_000 && outcome.2 == 0, "\(outcome)")
        #expect(log.numbers == log.numbers.sorted(), "handled out of order")
        #expect(log.numbers.count == outcome.0)
        #expect(statistics.peakBufferedIncomingBytes <= configuration.incomingBufferHardLimit)
        // The order held requests back, and the budget was what bounded them.
        #expect(statistics.peakBufferedIncomingBytes > configuration.incomingBufferBudget / 2)
        print(
            "serial budget: \(outcome.0) handled, \(outcome.1) refused busy, peak \(statistics.peakBufferedIncomingBytes)"
        )
    }
}

/// Budget cases around serial order that once stalled a connection.
@Suite("Serial order and the buffer budget: no stall", .timeLimit(.minutes(2)))
struct SerialOrderBudgetStallTests {
    @Test("a handler waiting for a large reply of the peer's while requests pile up behind it: reading goes on")
    func handlerWaitsForLargeReply() async throws {
        var router = BLIPRouter(handlerOrder: .serial)
        router.register(profile: "ask-back") { _, context in
            // Waits for a 900 KB reply, read whole, while the client's other requests queue up behind.
            let reply = try await context.connection.sendRequest(BLIPRequest(profile: "big"))
            return BLIPResponse(text: "\(reply.body.readableBytes)")
        }
        router.register(profile: "small") { _, _ in BLIPResponse() }
        var configuration = BLIPConnection.Configuration()
        configuration.incomingBufferBudget = 1 << 20
        configuration.incomingBufferHardLimit = 2 << 20
        var clientRouter = BLIPRouter()
        clientRouter.register(profile: "big") { _, _ in BLIPResponse(body: pattern(900_000)) }
        let peers = InMemoryPeers(router: router, serverConfiguration: configuration)
        try await peers.run(clientRouter: clientRouter) { connection in
            let replies = Replies()
            let asked = connection.enqueueRequest(BLIPRequest(profile: "ask-back"), timeout: .seconds(60))
            for _ in 0..<150 {
                connection.sendRequest(BLIPRequest(profile: "small", body: pattern(20_000)), onReply: replies.record)
            }
            // Before reading paused for whole replies still arriving, the first handler never got its reply.
            #expect(String(buffer: try await asked.reply().body) == "900000")
            try await replies.wait(for: 150)
        }
    }

    @Test("a no-reply request that was let through, then waits: another is let through (no stall)")
    func exemptRequestThatWaits() async throws {
        let log = OrderLog()
        var configuration = BLIPConnection.Configuration()
        configuration.incomingBufferBudget = 256 << 10
        configuration.incomingBufferHardLimit = 512 << 10
        let peers = InMemoryPeers(router: log.serialRouter(), serverConfiguration: configuration)
        try await peers.run { connection in
            let replies = Replies()
            // 90 KB of properties: the first request starts only after six frames, while the no-reply one
            // behind it fills the budget and is the one let through. When that one is complete and waits, the
            // first has used its send window with its ACKs withheld: it must be let through next.
            connection.sendRequest(
                BLIPRequest(
                    profile: "record",
                    properties: ["Seq": "0", "Large": String(repeating: "p", count: 90_000)],
                    body: pattern(150_000)
                ),
                onReply: replies.record
            )
            try await connection.sendNoReply(
                BLIPRequest(profile: "record", properties: ["Seq": "1"], body: pattern(200_000))
            )
            connection.sendRequest(BLIPRequest(profile: "record", properties: ["Seq": "2"]), onReply: replies.record)
            try await replies.wait(for: 2)  // the stall: these never came
            // The small third request may arrive while the 200 KB one waits for the first and fills the
            // waiting room: then it is refused with 503, as the budget rules say (seen 1 run in 5 on a busy
            // machine, and under ThreadSanitizer). Anything else, or a failure of the first, is wrong.
            let answered = replies.failures == 0 && log.sequence == [0, 1, 2]
            let refusedThird = replies.errorCodes == [503] && replies.failures == 1 && log.sequence == [0, 1]
            #expect(answered || refusedThird, "ERR codes \(replies.errorCodes), handled \(log.sequence)")
        }
    }
}
