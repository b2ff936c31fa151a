/// `withTaskCancellationHandler` that runs `operation` where its caller runs, with no executor switch.
///
/// The module's async functions run on their caller's executor (`NonisolatedNonsendingByDefault`), but the
/// standard library's operation closure does not: it runs on Swift's pool, so a send from an actor left the
/// actor and came back (two switches per request), and where the pool's jobs run on NIO's event loops (the
/// `blip` tool installs them as the global executor) each switch queued a job. For a caller on an actor the
/// closure is isolated to that actor. One without an actor that runs on the connection's own `loop` as that
/// loop's serial executor (NIO's global executor) is isolated to the loop: entering is then free, and only
/// the return to the caller switches. Any other caller has the operation handed over as its own.
func withCancellationHandlerOnCallersExecutor<Result: Sendable>(
    loop: EventLoopIsolation?,
    _ operation: nonisolated(nonsending) @Sendable () async throws -> Result,
    onCancel: @Sendable () -> Void
) async throws -> Result {
    let isolation: (any Actor)? = #isolation
    if let actor = isolation {
        return try await withCancellationHandler(on: actor, operation, onCancel: onCancel)
    }
    if let loop, loop.runsCurrentTask {
        return try await withCancellationHandler(on: loop, operation, onCancel: onCancel)
    }
    return try await withTaskCancellationHandler(operation: operation, onCancel: onCancel)
}

private func withCancellationHandler<Result: Sendable>(
    on actor: isolated any Actor,
    _ operation: nonisolated(nonsending) @Sendable () async throws -> Result,
    onCancel: @Sendable () -> Void
) async throws -> Result {
    try await withTaskCancellationHandler(
        operation: {
            _ = actor  // capturing the isolated parameter isolates the closure to the actor
            return try await operation()
        },
        onCancel: onCancel
    )
}
