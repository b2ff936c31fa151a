public import BLIP
internal import NIOConcurrencyHelpers
internal import NIOCore
internal import Synchronization

/// What serial handlers saw, in the order they ran.
public final class OrderLog: Sendable {
    public init() {}

    private let state = NIOLockedValueBox<(sequence: [Int], numbers: [UInt64])>(([], []))
    private let running = Atomic<Int>(0)
    private let most = Atomic<Int>(0)

    public func enter(_ request: BLIPRequest, _ context: BLIPRequestContext) {
        let now = self.running.wrappingAdd(1, ordering: .relaxed).newValue
        self.most.max(now, ordering: .relaxed)
        self.state.withLockedValue {
            $0.sequence.append(Int(request.properties["Seq"] ?? "") ?? -1)
            $0.numbers.append(context.requestNumber)
        }
    }

    public func leave() { self.running.wrappingSubtract(1, ordering: .relaxed) }

    public var sequence: [Int] { self.state.withLockedValue { $0.sequence } }
    public var numbers: [UInt64] { self.state.withLockedValue { $0.numbers } }
    public var mostAtOnce: Int { self.most.load(ordering: .relaxed) }
}

/// Counts replies given to callbacks, and waits (bounded) for a number of them.
public final class Replies: Sendable {
    public init() {}

    private let state = NIOLockedValueBox<(count: Int, failures: Int, errorCodes: [Int32])>((0, 0, []))

    @Sendable public func record(_ result: Result<BLIPResponse, any Error>) {
        self.state.withLockedValue { state in
            state.count += 1
            if case .failure(let error) = result {
                state.failures += 1
                if let error = error as? BLIPError { state.errorCodes.append(error.code.rawValue) }
            }
        }
    }

    public var count: Int { self.state.withLockedValue { $0.count } }
    public var failures: Int { self.state.withLockedValue { $0.failures } }
    public var errorCodes: [Int32] { self.state.withLockedValue { $0.errorCodes } }

    /// Waits until `count` replies came, for at most 120 s; throws if they did not.
    public func wait(for count: Int) async throws {
        for _ in 0..<12_000 where self.count < count { try await Task.sleep(for: .milliseconds(10)) }
        guard self.count == count else { throw MissingReplies(expected: count, received: self.count) }
    }
}

/// Fewer replies came than a test waited for.
public struct MissingReplies: Error, CustomStringConvertible {
    public var expected: Int
    public var received: Int
    public var description: String { "\(self.received) of \(self.expected) replies" }
}

/// A small deterministic generator (SplitMix64), so that a failing case can be run again.
public struct SeededRandom {
    private var state: UInt64

    public init(seed: UInt64) { self.state = seed }

    public mutating func next() -> UInt64 {
        self.state &+= 0x9E37_79B9_7F4A_7C15
        var z = self.state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}

extension OrderLog {
    /// A serial router whose handlers (`record`, `record-sync`, `record-stream`) record each request's `Seq`
    /// property and number here.
    public func serialRouter() -> BLIPRouter {
        self.router(order: .serial)
    }

    /// ``serialRouter()``'s handlers, in `order`.
    public func router(order: BLIPRouter.HandlerOrder) -> BLIPRouter {
        let log = self
        var router = BLIPRouter(handlerOrder: order)
        router.register(profile: "record") { request, context in
            log.enter(request, context)
            await Task.yield()
            log.leave()
            return BLIPResponse(text: request.properties["Seq"] ?? "")
        }
        router.registerSynchronous(profile: "record-sync") { request, context in
            log.enter(request, context)
            log.leave()
            return BLIPResponse(text: request.properties["Seq"] ?? "")
        }
        router.registerStreaming(profile: "record-stream") { request, context in
            log.enter(BLIPRequest(properties: request.properties), context)
            var total = 0
            for try await piece in request.body { total += piece.readableBytes }
            log.leave()
            return BLIPResponse(text: "\(total)")
        }
        return router
    }
}
