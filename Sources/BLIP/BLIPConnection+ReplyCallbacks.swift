internal import BLIPEngine

/// Called once with a request's reply, or with why there is none (see
/// ``BLIPConnection/sendRequest(_:timeout:progress:onReply:)``).
public typealias BLIPReplyHandler = @Sendable (Result<BLIPResponse, any Error>) -> Void

extension BLIPConnection {
    /// Sends a request and calls `onReply` once with what ``sendRequest(_:timeout:progress:)`` would
    /// return or throw: the reply, a ``BLIPError`` for an ERR reply, a ``BLIPConnectionError`` when the
    /// connection failed or closed first or the time ran out, or `CancellationError` after
    /// ``BLIPPendingReply/cancel()``.
    ///
    /// For callers that keep many requests in flight from where their replies arrive: no task waits and
    /// none is resumed. `onReply` runs on the thread that read the reply (a WebSocket connection's event
    /// loop), outside the connection's lock. It may send more requests; it must not block or compute for
    /// long, since the connection reads nothing meanwhile. It runs before this returns when the request
    /// cannot be queued (the connection has closed), and before ``BLIPPendingReply/cancel()`` returns when
    /// that ends the request: a caller holding a lock of its own around either must not take it in
    /// `onReply`.
    ///
    /// - Parameter request: The request; its `Profile` property says what it is for.
    /// - Parameter timeout: How long to wait for the reply (nil: ``Configuration/requestTimeout``). Past
    ///   it the request is given up as by ``BLIPPendingReply/cancel()``, and `onReply` gets
    ///   ``BLIPConnectionError/Code/timedOut``; a reply that has begun to arrive by then is delivered as it
    ///   completes (or fails). Only a request with a timeout pays for a timer (a task).
    /// - Parameter progress: Told where the request is as it goes, up to a final report
    ///   (``BLIPMessageProgress``).
    /// - Parameter onReply: Called once with the outcome.
    /// - Returns: What cancels the request.
    @discardableResult
    public func sendRequest(
        _ request: BLIPRequest,
        timeout: Duration? = nil,
        progress: BLIPProgressHandler? = nil,
        onReply: @escaping BLIPReplyHandler
    ) -> BLIPPendingReply {
        let core = self.core
        var request = request
        var handler = onReply
        if let tracer = core.requestTracer {
            let facts = RequestTracer.RequestFacts.sent(request)
            let (span, traced) = tracer.startSending(request, facts: facts)
            request = traced
            handler = { result in
                RequestTracer.endSending(span, facts: facts, result: result, replySize: \.tracedSize)
                onReply(result)
            }
        }
        let timeout = timeout ?? core.configuration.requestTimeout
        let timer = timeout.map { _ in RequestTimer() }
        if let timer {
            let untimed = handler
            handler = { result in
                timer.stop()
                untimed(result)
            }
        }
        let id = core.sendRequest(
            request,
            progress: progress.map { ProgressReporter(expectsReply: true, $0) },
            onReply: handler
        )
        // Started once the request is queued: it has no handle before.
        if let id, let timer, let timeout {
            let error = Self.timedOut(request, after: timeout)
            timer.start(timeout, on: core.loopIsolation?.eventLoop) { core.cancelReply(to: id, with: error) }
        }
        return BLIPPendingReply(core: core, id: id)
    }
}

/// A request sent with ``BLIPConnection/sendRequest(_:timeout:progress:onReply:)``, to cancel it.
public struct BLIPPendingReply: Sendable {
    let core: ConnectionCore
    /// Nil for a request that failed as it was sent.
    let id: BLIPOutgoingID?

    /// Gives the reply up, as cancelling the task of ``BLIPConnection/sendRequest(_:timeout:progress:)``
    /// does: a request not yet started is never sent, one already started is sent whole (BLIP cannot abort
    /// a message) and its reply is dropped; `onReply` gets `CancellationError` at once. Does nothing once
    /// the reply has begun to arrive or the request has ended.
    public func cancel() {
        guard let id = self.id else { return }
        self.core.cancelReply(to: id, with: CancellationError())
    }
}
