internal import BLIP
internal import Synchronization

/// Keeps requests in flight with `BLIPConnection.sendRequest(_:timeout:progress:onReply:)`: each reply's
/// callback sends the next request, where the reply was read (no task, no continuation per request), as the
/// handler-style raw baseline does with raw messages.
final class BenchReplyCallbacks: Sendable {
    private struct State {
        var latencies: [Duration] = []
        var sent = 0
        var completed = 0
        var failure: (any Error)?
        var waiter: CheckedContinuation<[Duration], any Error>?
    }

    private let connection: BLIPConnection
    private let request: BLIPRequest
    private let count: Int
    private let state = Mutex(State())

    private init(connection: BLIPConnection, request: BLIPRequest, count: Int) {
        self.connection = connection
        self.request = request
        self.count = count
    }

    /// Sends `count` copies of `request`, `concurrency` at a time; returns each one's round-trip time, in
    /// no order, or throws the first failure once every request sent has ended.
    static func measure(
        _ request: BLIPRequest,
        on connection: BLIPConnection,
        count: Int,
        concurrency: Int
    ) async throws -> [Duration] {
        guard count > 0 else { return [] }
        let driver = BenchReplyCallbacks(connection: connection, request: request, count: count)
        return try await withCheckedThrowingContinuation { continuation in
            driver.state.withLock {
                $0.waiter = continuation
                $0.latencies.reserveCapacity(count)
            }
            for _ in 0..<min(max(1, concurrency), count) { driver.sendNext() }
        }
    }

    private func sendNext() {
        let mayStart = self.state.withLock { state -> Bool in
            guard state.failure == nil, state.sent < self.count else { return false }
            state.sent += 1
            return true
        }
        guard mayStart else { return }
        let start = ContinuousClock.now
        self.connection.sendRequest(self.request) { result in self.ended(result, after: ContinuousClock.now - start) }
    }

    private func ended(_ result: Result<BLIPResponse, any Error>, after latency: Duration) {
        let finished = self.state.withLock {
            state -> (CheckedContinuation<[Duration], any Error>, Result<[Duration], any Error>)? in
            state.completed += 1
            switch result {
            case .success: state.latencies.append(latency)
            case .failure(let error): state.failure = state.failure ?? error
            }
            let allEnded = state.completed == state.sent && (state.failure != nil || state.sent == self.count)
            guard allEnded, let waiter = state.waiter.take() else { return nil }
            if let failure = state.failure { return (waiter, .failure(failure)) }
            return (waiter, .success(state.latencies))
        }
        if let (waiter, outcome) = finished {
            waiter.resume(with: outcome)
        } else {
            self.sendNext()
        }
    }
}
