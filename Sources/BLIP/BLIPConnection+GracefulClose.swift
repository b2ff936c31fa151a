extension BLIPConnection {
    /// Closes the connection once what is in flight has finished, for a server going away or a client
    /// logging out without losing a reply.
    ///
    /// From the call on, requests from the peer that expect a reply and begin arriving are answered ERR
    /// BLIP/503 once they have arrived (no-reply requests are still handled).
    /// Requests that began arriving before, or were handed to handlers or to ``incomingRequests``, finish
    /// and their replies are sent; requests of ours get their replies; messages being sent complete. When
    /// nothing is in flight,
    /// or after `drainTimeout`, the connection closes with `code` and `reason`, and whatever is still
    /// pending then fails with ``BLIPConnectionError/Code/connectionClosed`` carrying the returned status.
    /// Cancelling the calling task skips the rest of the wait and closes at once. A handler that calls it
    /// counts as in flight itself: start it in a task, as with ``close(code:reason:)``.
    ///
    /// - Parameters:
    ///   - drainTimeout: The longest wait for what is in flight.
    ///   - code: 1001 (going away) by default; see ``close(code:reason:)``.
    ///   - reason: Sent in the close frame.
    @discardableResult
    public func closeGracefully(
        drainTimeout: Duration,
        code: BLIPCloseCode = .goingAway,
        reason: String = "going away"
    ) async -> BLIPCloseStatus {
        precondition(code.isSendable, "close code \(code) cannot be sent (RFC 6455 7.4)")
        if let status = self.closeStatus { return status }
        _ = await self.core.drain(timeout: drainTimeout)
        return await self.close(code: code, reason: reason)
    }
}
