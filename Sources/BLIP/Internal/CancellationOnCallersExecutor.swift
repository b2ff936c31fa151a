/// `withTaskCancellationHandler` that runs `operation` where its caller runs, with no executor switch.
///
/// The module's async functions run on their caller's executor (`NonisolatedNonsendingByDefault`), but the
/// standard library's operation closure does not: it runs on Swift's pool, so a send from an actor left the
/// actor and came back (two switches per request), and where the pool's jobs run on NIO's event loops (the
/// `blip` tool installs them as the global executor) each switch queued a job. For a caller on an actor the
/// closure is isolated to that actor, for one without the operation is handed over as the caller's own.
func withCancellationHandlerOnCallersExecutor<Result: Sendable>(
    _ operation: nonisolated(nonsending) @Sendable () async throws -> Result,
    onCancel: @Sendable () -> Void
) async throws -> Result {
    let isolation: (any Actor)? = #isolation
    guard let actor = isolation else {
        return try await withTaskCancellationHandler(operation: operation, onCancel: onCancel)
    }
    return try await withCancellationHandler(on: actor, operation, onCancel: onCancel)
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
