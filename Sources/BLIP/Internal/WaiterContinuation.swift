/// The continuation of a task that waits on the connection (for a reply, a body piece, a request, a
/// close). Checked in debug builds, where tests run: a second resumption traps and a dropped one is
/// reported. Unchecked in release builds: `CheckedContinuation`'s layout is private to the Swift runtime's
/// module, so every value holding one inline (the connection's state, each operation's effects, a reply
/// waiter) was copied, tested and destroyed through the runtime's generic value witnesses, for every
/// message. `UnsafeContinuation` is a plain pointer; the connection's lock makes each resumption happen
/// once (a waiter leaves its table, under the lock, before it is resumed).
#if DEBUG
    typealias WaiterContinuation<Value, Failure: Error> = CheckedContinuation<Value, Failure>
#else
    typealias WaiterContinuation<Value, Failure: Error> = UnsafeContinuation<Value, Failure>
#endif

/// Suspends the calling task until `register`'s continuation is resumed (see ``WaiterContinuation``).
/// `function` names the waiting operation in a checked continuation's misuse reports.
func withWaiterContinuation<Value>(
    isolation: isolated (any Actor)? = #isolation,
    function: String = #function,
    _ register: (WaiterContinuation<Value, any Error>) -> Void
) async throws -> Value {
    #if DEBUG
        try await withCheckedThrowingContinuation(isolation: isolation, function: function, register)
    #else
        try await withUnsafeThrowingContinuation(isolation: isolation, register)
    #endif
}

/// ``withWaiterContinuation(isolation:function:_:)`` for what cannot fail.
func withWaiterContinuation<Value>(
    isolation: isolated (any Actor)? = #isolation,
    function: String = #function,
    _ register: (WaiterContinuation<Value, Never>) -> Void
) async -> Value {
    #if DEBUG
        await withCheckedContinuation(isolation: isolation, function: function, register)
    #else
        await withUnsafeContinuation(isolation: isolation, register)
    #endif
}
