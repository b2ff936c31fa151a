internal import Logging

extension BLIPConnection {
    /// Runs the connection's handlers until it closes (as ``run()`` does) and, beside them, `scope`: the
    /// application's own work for this connection (a feed it pushes, requests of its own), in a child task
    /// that is cancelled as soon as the connection closes. A `scope` that throws while the connection is
    /// open closes it with 1011 (internal error), and the error is logged; returning leaves the connection
    /// open. Returns once both have ended.
    @discardableResult
    package func run(scope: (@Sendable (BLIPConnection) async throws -> Void)?) async -> BLIPCloseStatus {
        guard let scope else { return await self.run() }
        return await self.core.run {
            do {
                try await scope(self)
            } catch {
                await self.scopeFailed(error)
            }
        }
    }

    private func scopeFailed(_ error: any Error) async {
        // Ended by the connection's close (cancelled, or a request it was sending failed), or cancelled with
        // the server's task (which closes the connection its own way): nothing to add.
        guard !self.isClosed, !Task.isCancelled, !(error is CancellationError) else {
            self.core.logger.debug("connection scope ended with the connection", metadata: ["blip.error": "\(error)"])
            return
        }
        self.core.logger.error("connection scope failed; closing with 1011", metadata: ["blip.error": "\(error)"])
        await self.close(code: .internalError, reason: "internal error")
    }
}
