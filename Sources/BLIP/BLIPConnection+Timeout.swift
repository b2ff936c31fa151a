extension BLIPConnection {
    /// Runs `operation` (a send) in a child task and cancels it once `timeout` has passed, which applies
    /// the send's cancellation rules; then throws ``BLIPConnectionError/Code/timedOut``. Whichever ends
    /// first wins: a reply that comes as the time runs out is either returned or dropped, never both.
    static func withTimeout<Result: Sendable>(
        _ timeout: Duration,
        of request: BLIPRequest,
        _ operation: @escaping @Sendable () async throws -> Result
    ) async throws -> Result {
        try await withThrowingTaskGroup(of: Result?.self) { group in
            group.addTask { try await operation() }
            group.addTask {
                try await Task.sleep(for: timeout)
                return nil
            }
            defer { group.cancelAll() }
            // The first child to end decides; cancelling the other ends it soon (the send by its own rules).
            guard let result = try await group.next()! else {
                throw BLIPConnectionError(
                    .timedOut,
                    "no reply to \(request.profile.map { "'\($0)'" } ?? "the request") within \(timeout)"
                )
            }
            return result
        }
    }
}
