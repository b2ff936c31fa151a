package import NIOCore

/// What runs its tasks on one event loop: the WebSocket transport's task executor.
package protocol EventLoopBound: AnyObject, Sendable {
    var eventLoop: any EventLoop { get }
}

/// An actor whose executor is a connection's event loop, so that a caller already running there can be
/// isolated to it without a switch.
///
/// Where NIO's event loops are Swift's global executor (the `blip` tool installs them), a task with no actor
/// runs on a loop as that loop's serial executor. Every entry into the generic executor (which
/// `withTaskCancellationHandler` makes for a caller with no actor) is then a real switch: a job queued on
/// the loop. Isolated to this actor instead, the send stays where it is.
final actor EventLoopIsolation {
    nonisolated let eventLoop: any EventLoop
    /// Kept: a loop that is not its own executor makes a new one on each request, which an unowned
    /// reference would not keep alive.
    private nonisolated let executor: any SerialExecutor

    init(_ eventLoop: any EventLoop) {
        self.eventLoop = eventLoop
        self.executor = eventLoop.executor
    }

    nonisolated var unownedExecutor: UnownedSerialExecutor {
        self.executor.asUnownedSerialExecutor()
    }

    /// Whether the current task, which has no actor, runs on this loop as its serial executor: it is on the
    /// loop's thread and prefers no task executor (a preferred one runs it as the generic executor).
    ///
    /// There is no way to ask for the current executor itself, so a task started synchronously from one of
    /// the loop's own callbacks (`Task.immediate`), which runs there as the generic executor, is taken for
    /// one the loop runs: its send then waits for one queued job on the loop before it is queued, with the
    /// same outcome.
    nonisolated var runsCurrentTask: Bool {
        guard self.eventLoop.inEventLoop else { return false }
        // Bound once: every copy of an `UnsafeCurrentTask?` retains and releases the task.
        return withUnsafeCurrentTask { task in
            guard let task else { return false }
            return task.unownedTaskExecutor == nil
        }
    }
}
