internal import BLIPEngine
internal import CoreMetrics
internal import DequeModule
internal import NIOConcurrencyHelpers
internal import NIOCore

extension ConnectionCore {

    /// The next piece of a body stream; nil at its end. Returns without suspending when a piece is
    /// already there, which is the common case while a large body streams in.
    func nextChunk(of id: BLIPIncomingID) async throws -> ByteBuffer? {
        var effects = Effects()
        let ready = self.state.withLockedValue { state in state.takeReady(id, effects: &effects) }
        self.perform(&effects)
        if let ready { return try ready.get() }
        let piece = try await withCancellationHandlerOnCallersExecutor(loop: self.loopIsolation) {
            try await self.handOff { (continuation: WaiterContinuation<ByteBuffer?, any Error>) in
                var effects = Effects()
                self.state.withLockedValue {
                    $0.waitForPiece(
                        of: id,
                        continuation: continuation,
                        isCancelled: Task.isCancelled,
                        effects: &effects
                    )
                }
                self.perform(&effects)
            }
        } onCancel: {
            var effects = Effects()
            self.state.withLockedValue { $0.readerCancelled(of: id, effects: &effects) }
            self.perform(&effects)
        }
        return piece
    }

    /// The next piece of a body stream if one is there, without waiting (``BLIPSteppedConnection``): a
    /// piece, `.success(nil)` at the end, the stream's failure, or nil while nothing has arrived.
    func takeReadyChunk(of id: BLIPIncomingID) -> Result<ByteBuffer?, any Error>? {
        var effects = Effects()
        let ready = self.state.withLockedValue { state in state.takeReady(id, effects: &effects) }
        self.perform(&effects)
        return ready
    }

    /// Nobody will read the rest of this body: drop what is kept and let the rest drain.
    func abandonStream(_ id: BLIPIncomingID) {
        var effects = Effects()
        self.state.withLockedValue { $0.abandonStream(id, effects: &effects) }
        self.perform(&effects)
    }
}
