internal import NIOCore

extension ConnectionCore {
    /// Runs `send`, a send whose caller holds `token`, within `timeout` (nil: the configured
    /// ``BLIPConnection/Configuration/requestTimeout``; neither: no timer at all). When the time runs out the
    /// send is given up as a cancellation gives it up (``cancel(token:)``: a request not yet started is never
    /// sent, a reply not yet begun is dropped), and this throws ``BLIPConnectionError/Code/timedOut``. A reply
    /// that arrives as the time runs out is either returned or dropped, never both.
    ///
    /// The deadline is a timer on the connection's event loop (``RequestTimer``), stopped when the send ends:
    /// no task or task group per timed request.
    func withDeadline<Value>(
        _ timeout: Duration?,
        token: UInt64,
        of request: BLIPRequest,
        _ send: nonisolated(nonsending) () async throws -> Value
    ) async throws -> Value {
        guard let timeout = timeout ?? self.configuration.requestTimeout else { return try await send() }
        let timer = RequestTimer()
        timer.start(timeout, on: self.loopIsolation?.eventLoop) { self.cancel(token: token) }
        let outcome: Result<Value, any Error>
        do {
            outcome = .success(try await send())
        } catch {
            outcome = .failure(error)
        }
        guard await timer.stopAndWait() else { return try outcome.get() }
        // A deadline that found no message (its reply had begun, or it had ended) kept the token, as a
        // cancellation that came before queueing does: the call is over, so it goes.
        self.forgetCancelledToken(token)
        throw BLIPConnection.timedOut(request, after: timeout)
    }

    func forgetCancelledToken(_ token: UInt64) {
        self.state.withLockedValue { _ = $0.cancelledTokens.remove(token) }
    }
}
