internal import BLIPEngine
internal import CoreMetrics
internal import DequeModule
internal import NIOConcurrencyHelpers
internal import NIOCore

extension ConnectionCore {
    /// Counts body bytes as read; the writer must run if that made an ACK due (a missed ACK stalls a
    /// sender that waits on its window).
    static func consumed(_ id: BLIPIncomingID, bytes: Int, _ state: inout State, effects: inout Effects) {
        if state.engine.consumed(id, bytes: bytes) { effects.wakeWriter = true }
    }

    /// Hands a body piece to its stream's reader, or keeps it until read (counted against the buffer
    /// budget; its ACK waits until it is read).
    func yield(
        _ body: ByteBuffer,
        isComplete: Bool,
        to id: BLIPIncomingID,
        _ state: inout State,
        effects: inout Effects
    ) {
        guard var stream = state.streams[id] else {
            Self.consumed(id, bytes: body.readableBytes, &state, effects: &effects)  // its reader is gone
            return
        }
        var kept = 0
        if let waiter = stream.waiter, body.readableBytes > 0 || isComplete {
            stream.waiter = nil
            stream.isComplete = isComplete
            if body.readableBytes > 0 {
                // Read at once: it counts as consumed now.
                Self.consumed(id, bytes: body.readableBytes, &state, effects: &effects)
                effects.later { waiter.resume(returning: body) }
            } else {
                effects.later { waiter.resume(returning: nil) }
            }
        } else {
            kept = body.readableBytes
            if kept > 0 {
                stream.chunks.append(body)
                stream.keptBytes += kept
            }
            stream.isComplete = isComplete
        }
        if stream.isComplete && stream.chunks.isEmpty {
            state.streams.removeValue(forKey: id)  // nothing left: the reader's next call ends the stream
        } else {
            state.streams[id] = stream
        }
        if kept > 0 { _ = self.charge(kept, &state, effects: &effects) }
    }

    func failStream(_ state: inout State, _ id: BLIPIncomingID, _ error: any Error, effects: inout Effects) {
        guard var stream = state.streams[id], !stream.isComplete || !stream.chunks.isEmpty else { return }
        if let waiter = stream.waiter {
            stream.waiter = nil
            effects.later { waiter.resume(throwing: error) }
        }
        stream.failure = error
        stream.chunks.removeAll()
        let kept = stream.keptBytes
        stream.keptBytes = 0
        state.streams[id] = stream
        self.release(kept, &state, effects: &effects)
    }

    /// The next piece of a body stream; nil at its end. Returns without suspending when a piece is
    /// already there, which is the common case while a large body streams in.
    func nextChunk(of id: BLIPIncomingID) async throws -> ByteBuffer? {
        var effects = Effects()
        let ready = self.state.withLockedValue { state in self.takeReady(id, &state, effects: &effects) }
        self.perform(&effects)
        if let ready { return try ready.get() }
        let piece = try await withCancellationHandlerOnCallersExecutor(loop: self.loopIsolation) {
            try await self.handOff { (continuation: WaiterContinuation<ByteBuffer?, any Error>) in
                var effects = Effects()
                self.state.withLockedValue { state in
                    if let ready = self.takeReady(id, &state, effects: &effects) {
                        effects.later { continuation.resume(with: ready) }
                        return
                    }
                    if Task.isCancelled {
                        effects.later { continuation.resume(throwing: CancellationError()) }
                        return
                    }
                    state.streams[id]?.waiter = continuation
                }
                self.perform(&effects)
            }
        } onCancel: {
            var effects = Effects()
            self.state.withLockedValue { state in
                if let waiter = state.streams[id]?.waiter {
                    state.streams[id]?.waiter = nil
                    effects.later { waiter.resume(throwing: CancellationError()) }
                }
            }
            self.perform(&effects)
        }
        return piece
    }

    /// The next piece of a body stream if one is there, without waiting (``BLIPSteppedConnection``): a
    /// piece, `.success(nil)` at the end, the stream's failure, or nil while nothing has arrived.
    func takeReadyChunk(of id: BLIPIncomingID) -> Result<ByteBuffer?, any Error>? {
        var effects = Effects()
        let ready = self.state.withLockedValue { state in self.takeReady(id, &state, effects: &effects) }
        self.perform(&effects)
        return ready
    }

    /// What a reader gets without waiting: a kept piece (now consumed), the end, the stream's failure, or
    /// `alreadyReading` while another reader waits; nil if it has to wait.
    private func takeReady(
        _ id: BLIPIncomingID,
        _ state: inout State,
        effects: inout Effects
    ) -> Result<ByteBuffer?, any Error>? {
        guard var stream = state.streams[id] else { return .success(nil) }
        if stream.waiter != nil {
            // A second reader would take the first one's place, and the first would wait forever. (Two that
            // arrive at once both pass the first look; if the one turned away is cancelled meanwhile, its
            // cancellation reaches the waiting one: each still gets exactly one answer.)
            return .failure(BLIPConnectionError(.alreadyReading, "another task is already reading this body stream"))
        }
        if let failure = stream.failure {
            state.streams.removeValue(forKey: id)
            return .failure(failure)
        }
        if let chunk = stream.chunks.popFirst() {
            stream.keptBytes -= chunk.readableBytes
            Self.consumed(id, bytes: chunk.readableBytes, &state, effects: &effects)
            state.streams[id] = stream
            self.release(chunk.readableBytes, &state, effects: &effects)
            return .success(chunk)
        }
        if stream.isComplete {
            state.streams.removeValue(forKey: id)
            return .success(nil)
        }
        return nil
    }

    /// Nobody will read the rest of this body: drop what is kept and let the rest drain.
    func abandonStream(_ id: BLIPIncomingID) {
        var effects = Effects()
        self.state.withLockedValue { state in
            self.progressFailed(reply: id, &state, effects: &effects)
            guard let stream = state.streams.removeValue(forKey: id) else { return }
            Self.consumed(id, bytes: stream.keptBytes, &state, effects: &effects)
            self.release(stream.keptBytes, &state, effects: &effects)
            if case .streamed = state.inbound.removeValue(forKey: id) {
                if state.engine.drain(id) { effects.wakeWriter = true }  // nobody reads the rest
            }
        }
        self.perform(&effects)
    }
}
