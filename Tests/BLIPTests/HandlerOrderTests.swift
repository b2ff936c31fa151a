import BLIP
import NIOConcurrencyHelpers
import NIOCore
import Synchronization
import Testing

/// The router's handler order: serial handlers see requests one at a time, in arrival order.
@Suite("Handler order", .timeLimit(.minutes(2)))
struct HandlerOrderTests {
    final class Observations: Sendable {
        let seen = NIOLockedValueBox<[Int]>([])
        let running = Atomic<Int>(0)
        let mostAtOnce = Atomic<Int>(0)
    }

    static func router(order: BLIPRouter.HandlerOrder, observations: Observations) -> BLIPRouter {
        var router = BLIPRouter(handlerOrder: order)
        router.register(profile: "changes") { request, _ in
            let now = observations.running.wrappingAdd(1, ordering: .relaxed).newValue
            observations.mostAtOnce.max(now, ordering: .relaxed)
            // Give other handlers every chance to start meanwhile.
            await Task.yield()
            observations.seen.withLockedValue { $0.append(Int(request.properties["Seq"] ?? "") ?? -1) }
            await Task.yield()
            observations.running.wrappingSubtract(1, ordering: .relaxed)
            return BLIPResponse()
        }
        return router
    }

    @Test("serial: 10 000 no-reply requests reach the handler in exact order, one at a time")
    func serialOrder() async throws {
        let observations = Observations()
        let peers = InMemoryPeers(router: Self.router(order: .serial, observations: observations))
        let count = 10_000
        try await peers.run { connection in
            for index in 0..<count {
                try await connection.sendNoReply(BLIPRequest(profile: "changes", properties: ["Seq": "\(index)"]))
            }
            // A request with a reply, after them all, comes back once they have all been handled.
            _ = try await connection.sendRequest(BLIPRequest(profile: "changes", properties: ["Seq": "\(count)"]))
        }
        let seen = observations.seen.withLockedValue { $0 }
        #expect(seen == Array(0...count))
        #expect(observations.mostAtOnce.load(ordering: .relaxed) == 1)
    }

    @Test("concurrent (the default): handlers overlap")
    func concurrentOverlaps() async throws {
        #expect(BLIPRouter().handlerOrder == .concurrent)
        let observations = Observations()
        var router = Self.router(order: .concurrent, observations: observations)
        let gate = NIOLockedValueBox(0)
        router.register(profile: "meet") { _, _ in
            // Each waits (bounded) until two are inside at once: only possible when handlers overlap.
            gate.withLockedValue { $0 += 1 }
            for _ in 0..<4_000 where gate.withLockedValue({ $0 }) < 2 { try await Task.sleep(for: .milliseconds(5)) }
            return BLIPResponse(text: "\(gate.withLockedValue { $0 })")
        }
        let peers = InMemoryPeers(router: router)
        try await peers.run { connection in
            async let first = connection.sendRequest(BLIPRequest(profile: "meet"))
            async let second = connection.sendRequest(BLIPRequest(profile: "meet"))
            let replies = try await [first, second].map { String(buffer: $0.body) }
            #expect(replies == ["2", "2"])
        }
    }

    @Test("serial handlers with a streamed request in front still read its body (no wedge)")
    func serialWithStreaming() async throws {
        var router = BLIPRouter(handlerOrder: .serial)
        router.registerStreaming(profile: "upload") { request, _ in
            var total = 0
            for try await piece in request.body { total += piece.readableBytes }
            return BLIPResponse(text: "\(total)")
        }
        router.register(profile: "echo") { request, _ in BLIPResponse(body: request.body) }
        let peers = InMemoryPeers(router: router)
        try await peers.run { connection in
            async let upload = connection.sendRequest(
                BLIPRequest(profile: "upload"),
                body: ChunkedBody(total: 4 << 20, chunk: 64 << 10)
            )
            async let echo = connection.sendRequest(BLIPRequest(profile: "echo", text: "after"))
            let (uploaded, echoed) = try await (upload, echo)
            #expect(String(buffer: uploaded.body) == "\(4 << 20)")
            #expect(String(buffer: echoed.body) == "after")
        }
    }
}
