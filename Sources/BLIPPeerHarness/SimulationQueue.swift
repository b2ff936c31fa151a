internal import Dispatch

/// Where long seeded simulations run in a test process: one queue for all of them, so that together they
/// take at most one core and never a thread of Swift's cooperative pool. Run on that pool, they filled it,
/// and the socket tests beside them waited for a thread past their time limits on a loaded machine.
package enum SimulationQueue {
    /// Runs `work` on the queue, after the simulations queued before it, and returns its result.
    package static func run<Result: Sendable>(_ work: @escaping @Sendable () -> Result) async -> Result {
        await withCheckedContinuation { continuation in
            Self.queue.async { continuation.resume(returning: work()) }
        }
    }

    private static let queue = DispatchQueue(label: "BLIP seeded simulations")
}
