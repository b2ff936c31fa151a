internal import NIOCore

extension BLIPConnection {
    // The sends, within `timeout` or the configured ``Configuration/requestTimeout`` when there is one.
    // Without one the send is called directly: no closure to allocate per request.

    func timedSendRequest(
        _ request: BLIPRequest,
        timeout: Duration?,
        progress: ProgressReporter?
    ) async throws -> BLIPResponse {
        guard let timeout = timeout ?? self.core.configuration.requestTimeout else {
            return try await self.core.sendRequest(request, progress: progress)
        }
        return try await Self.withTimeout(timeout, of: request) {
            try await self.core.sendRequest(request, progress: progress)
        }
    }

    func timedSendRequest<Body: AsyncSequence & Sendable>(
        _ request: BLIPRequest,
        body: Body,
        timeout: Duration?,
        progress: ProgressReporter?
    ) async throws -> BLIPResponse where Body.Element == ByteBuffer {
        guard let timeout = timeout ?? self.core.configuration.requestTimeout else {
            return try await self.core.sendRequest(request, body: body, progress: progress)
        }
        return try await Self.withTimeout(timeout, of: request) {
            try await self.core.sendRequest(request, body: body, progress: progress)
        }
    }

    func timedSendRequestStreamingReply(
        _ request: BLIPRequest,
        timeout: Duration?,
        progress: ProgressReporter?
    ) async throws -> BLIPStreamedResponse {
        guard let timeout = timeout ?? self.core.configuration.requestTimeout else {
            return try await self.core.sendRequestStreamingReply(request, progress: progress)
        }
        return try await Self.withTimeout(timeout, of: request) {
            try await self.core.sendRequestStreamingReply(request, progress: progress)
        }
    }

    func timedSendNoReply(_ request: BLIPRequest, timeout: Duration?, progress: ProgressReporter?) async throws {
        guard let timeout = timeout ?? self.core.configuration.requestTimeout else {
            return try await self.core.sendNoReply(request, progress: progress)
        }
        try await Self.withTimeout(timeout, of: request) {
            try await self.core.sendNoReply(request, progress: progress)
        }
    }

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
            guard let result = try await group.next()! else { throw Self.timedOut(request, after: timeout) }
            return result
        }
    }

    /// What a request whose time ran out fails with.
    static func timedOut(_ request: BLIPRequest, after timeout: Duration) -> BLIPConnectionError {
        BLIPConnectionError(
            .timedOut,
            "no reply to \(request.profile.map { "'\($0)'" } ?? "the request") within \(timeout)"
        )
    }
}
