internal import Dispatch

/// Runs blocking code (a child process, a wait for one) on a Dispatch thread: on a two-core machine Swift
/// concurrency has two threads, and a test blocking them stalls every other suite's tasks.
public func offThePool<T: Sendable>(_ body: @escaping @Sendable () throws -> T) async throws -> T {
    try await withCheckedThrowingContinuation { continuation in
        DispatchQueue.global().async { continuation.resume(with: Result { try body() }) }
    }
}
