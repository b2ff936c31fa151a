internal import NIOConcurrencyHelpers

extension ConnectionCore {
    /// Waits for what the connection hands a task under its lock (a reply, a body piece, a request):
    /// `register` stores the continuation or resumes it. A continuation resumed before the task reached its
    /// await passes the value through the continuation's atomic status alone, which the Swift runtime does
    /// not report to ThreadSanitizer on that path; taking the lock the value was handed under once more
    /// (uncontended) makes the hand-off visible to it, whichever path the runtime took. Only under
    /// ThreadSanitizer: elsewhere the continuation's own atomics order the hand-off, and the lock would be one
    /// more acquisition per request.
    func handOff<Value>(
        function: String = #function,
        _ register: (WaiterContinuation<Value, any Error>) -> Void
    ) async throws -> Value {
        defer { if ThreadSanitizerPresence.isActive { self.state.withLockedValue { _ in } } }
        return try await withWaiterContinuation(function: function, register)
    }

    /// ``handOff(_:)`` for what cannot fail.
    func handOffThatCannotFail<Value>(
        function: String = #function,
        _ register: (WaiterContinuation<Value, Never>) -> Void
    ) async -> Value {
        defer { if ThreadSanitizerPresence.isActive { self.state.withLockedValue { _ in } } }
        return await withWaiterContinuation(function: function, register)
    }
}
