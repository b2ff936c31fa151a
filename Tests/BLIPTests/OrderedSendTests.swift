import BLIPTestSupport
import NIOConcurrencyHelpers
import NIOCore
import Synchronization
import Testing

@testable import BLIP

/// Sending in order from async code: ``BLIPConnection/enqueueRequest(_:timeout:progress:)`` takes a request's
/// place at once, and ``BLIPConnection/sendRequests(_:maximumInFlight:timeout:)`` keeps a window of them in
/// flight, yielding outcomes in request order.
@Suite("Ordered sends from async code", .timeLimit(.minutes(2)))
struct OrderedSendTests {
    /// A concurrent router that records which `Seq` came as which request number, and how many handlers were
    /// in at once.
    final class Arrivals: Sendable {
        let pairs = NIOLockedValueBox<[(number: UInt64, seq: Int)]>([])
        let inside = Atomic<Int>(0)
        let most = Atomic<Int>(0)

        var router: BLIPRouter {
            var router = BLIPRouter()
            router.register(profile: "note") { request, context in
                let now = self.inside.wrappingAdd(1, ordering: .relaxed).newValue
                self.most.max(now, ordering: .relaxed)
                self.pairs.withLockedValue { $0.append((context.requestNumber, Int(request.properties["Seq"]!)!)) }
                try await Task.sleep(for: .microseconds(200))
                self.inside.wrappingSubtract(1, ordering: .relaxed)
                return BLIPResponse(text: request.properties["Seq"]!)
            }
            return router
        }

        /// Requests whose number does not follow their `Seq` (request n is Seq n - 1).
        var overtaken: Int { self.pairs.withLockedValue { $0.filter { $0.number != UInt64($0.seq + 1) }.count } }
    }

    @Test("2 000 requests through sendRequests with 64 in flight: numbers follow the sequence, replies in order")
    func windowKeepsOrder() async throws {
        let arrivals = Arrivals()
        let peers = InMemoryPeers(router: arrivals.router)
        let replies = try await peers.run { connection in
            var seen: [String] = []
            let requests = (0..<2_000).lazy.map { BLIPRequest(profile: "note", properties: ["Seq": "\($0)"]) }
            for await result in connection.sendRequests(requests, maximumInFlight: 64) {
                seen.append(String(buffer: try result.get().body))
            }
            return seen
        }
        #expect(replies == (0..<2_000).map { "\($0)" })
        #expect(arrivals.overtaken == 0)
        #expect(arrivals.pairs.withLockedValue { $0.count } == 2_000)
        let most = arrivals.most.load(ordering: .relaxed)
        #expect(most <= 64 && most > 1, "at most 64 in flight, and more than one: \(most)")
    }

    @Test("enqueueRequest from child tasks' parent: 2 000 queued in call order, awaited afterwards")
    func enqueueThenAwait() async throws {
        let arrivals = Arrivals()
        let peers = InMemoryPeers(router: arrivals.router)
        try await peers.run { connection in
            let queued = (0..<2_000).map {
                connection.enqueueRequest(BLIPRequest(profile: "note", properties: ["Seq": "\($0)"]))
            }
            // Awaited from many tasks at once, in any order: each gets its own reply.
            try await withThrowingTaskGroup(of: Bool.self) { group in
                for (index, request) in queued.enumerated().reversed() {
                    group.addTask { String(buffer: try await request.reply().body) == "\(index)" }
                }
                for try await matches in group { #expect(matches) }
            }
            // A second wait gets the same outcome.
            #expect(String(buffer: try await queued[7].reply().body) == "7")
        }
        #expect(arrivals.overtaken == 0)
    }

    @Test("an ERR reply fails its own element only; the sequence goes on")
    func errorsStayInTheirPlace() async throws {
        let peers = InMemoryPeers(router: standardRouter())
        try await peers.run { connection in
            let requests = [
                BLIPRequest(profile: "echo", text: "a"), BLIPRequest(profile: "error"),
                BLIPRequest(profile: "nobody"), BLIPRequest(profile: "echo", text: "d"),
            ]
            var outcomes: [String] = []
            for await result in connection.sendRequests(requests, maximumInFlight: 2) {
                switch result {
                case .success(let reply): outcomes.append(String(buffer: reply.body))
                case .failure(let error as BLIPError): outcomes.append("\(error.code.rawValue)")
                case .failure(let error): outcomes.append("\(error)")
                }
            }
            #expect(outcomes == ["a", "409", "404", "d"])
        }
    }

    @Test("leaving the loop early cancels what is still in flight and leaves nothing behind")
    func earlyExitCancels() async throws {
        var router = BLIPRouter()
        let started = Atomic<Int>(0)
        let gate = Gate()
        router.register(profile: "slow") { request, _ in
            started.wrappingAdd(1, ordering: .relaxed)
            if request.properties["Seq"] != "0" { await gate.wait() }
            return BLIPResponse()
        }
        let peers = InMemoryPeers(router: router)
        try await peers.run { connection in
            let requests = (0..<100).map { BLIPRequest(profile: "slow", properties: ["Seq": "\($0)"]) }
            for await result in connection.sendRequests(requests, maximumInFlight: 8) {
                _ = try result.get()
                break
            }
            // The seven others were given up; their replies, when they come, are dropped (BLIP cannot
            // take a request back, so the connection remembers it until then), and nothing is left.
            gate.open()
            for _ in 0..<500 where connection.core.pendingBookkeeping > 0 {
                try await Task.sleep(for: .milliseconds(10))
            }
            #expect(connection.core.pendingBookkeeping == 0, "\(connection.stateDescription)")
        }
        #expect(started.load(ordering: .relaxed) <= 8, "no more than the window was ever sent")
    }

    @Test("cancelling the consuming task: nothing more is sent, and every request sent yields one outcome")
    func cancellingTheConsumer() async throws {
        var router = BLIPRouter()
        let started = Atomic<Int>(0)
        let gate = Gate()
        router.register(profile: "slow") { request, _ in
            started.wrappingAdd(1, ordering: .relaxed)
            if request.properties["Seq"] != "0" { await gate.wait() }
            return BLIPResponse()
        }
        let peers = InMemoryPeers(router: router)
        try await peers.run { connection in
            let firstCame = AsyncStream.makeStream(of: Void.self)
            let consumer = Task {
                var outcomes: [String] = []
                let requests = (0..<100).map { BLIPRequest(profile: "slow", properties: ["Seq": "\($0)"]) }
                for await result in connection.sendRequests(requests, maximumInFlight: 8) {
                    switch result {
                    case .success: outcomes.append("reply")
                    case .failure(let error): outcomes.append("\(type(of: error))")
                    }
                    firstCame.continuation.yield()
                }
                return outcomes
            }
            for await _ in firstCame.stream { break }
            consumer.cancel()
            let outcomes = await consumer.value
            // The window of 8, refilled once when the first outcome was taken (before the cancellation).
            #expect(outcomes.first == "reply" && (8...9).contains(outcomes.count), "\(outcomes)")
            #expect(outcomes.dropFirst().allSatisfy { $0 == "CancellationError" }, "\(outcomes)")
            gate.open()
        }
        #expect(started.load(ordering: .relaxed) <= 9, "at most the window, and the one that refilled it")
    }

    @Test("a task cancelled while it waits for reply() cancels the request")
    func cancellingTheWaiter() async throws {
        var router = BLIPRouter()
        router.register(profile: "hold") { _, _ in
            try await Task.sleep(for: .seconds(3_600))
            return BLIPResponse()
        }
        let peers = InMemoryPeers(router: router)
        try await peers.run { connection in
            let queued = connection.enqueueRequest(BLIPRequest(profile: "hold"))
            let waiter = Task { try await queued.reply() }
            try await Task.sleep(for: .milliseconds(50))
            waiter.cancel()
            await #expect(throws: CancellationError.self) { try await waiter.value }
            // Its outcome stays: a later wait ends the same way, at once.
            await #expect(throws: CancellationError.self) { try await queued.reply() }
        }
    }

    @Test("a request queued on a closed connection fails at once")
    func queuedAfterClose() async throws {
        let peers = InMemoryPeers(router: standardRouter())
        try await peers.run { connection in
            await connection.close()
            let queued = connection.enqueueRequest(BLIPRequest(profile: "echo"))
            let error = await #expect(throws: BLIPConnectionError.self) { try await queued.reply() }
            #expect(error?.code == .connectionClosed)
        }
    }
}
