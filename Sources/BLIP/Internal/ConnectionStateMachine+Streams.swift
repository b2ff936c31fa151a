internal import BLIPEngine
internal import CoreMetrics
internal import DequeModule
internal import NIOConcurrencyHelpers
internal import NIOCore

extension ConnectionStateMachine {
    /// A body stream's reader waits for the next piece (`continuation`), unless one is there already.
    mutating func waitForPiece(
        of id: BLIPIncomingID,
        continuation: WaiterContinuation<ByteBuffer?, any Error>,
        isCancelled: Bool,
        effects: inout Effects
    ) {
        if let ready = self.takeReady(id, effects: &effects) {
            effects.later { continuation.resume(with: ready) }
            return
        }
        if isCancelled {
            effects.later { continuation.resume(throwing: CancellationError()) }
            return
        }
        self.streams[id]?.waiter = continuation
    }

    /// A body stream's waiting reader was cancelled.
    mutating func readerCancelled(of id: BLIPIncomingID, effects: inout Effects) {
        if let waiter = self.streams[id]?.waiter {
            self.streams[id]?.waiter = nil
            effects.later { waiter.resume(throwing: CancellationError()) }
        }
    }

    /// Nobody will read the rest of this body.
    mutating func abandonStream(_ id: BLIPIncomingID, effects: inout Effects) {
        self.progressFailed(reply: id, effects: &effects)
        guard let stream = self.streams.removeValue(forKey: id) else { return }
        self.consumed(id, bytes: stream.keptBytes, effects: &effects)
        self.release(stream.keptBytes, effects: &effects)
        if case .streamed = self.inbound.removeValue(forKey: id) {
            if self.engine.drain(id) { effects.wakeWriter = true }  // nobody reads the rest
        }
    }

    /// Counts body bytes as read; the writer must run if that made an ACK due (a missed ACK stalls a
    /// sender that waits on its window).
    mutating func consumed(_ id: BLIPIncomingID, bytes: Int, effects: inout Effects) {
        if self.engine.consumed(id, bytes: bytes) { effects.wakeWriter = true }
    }

    /// Hands a body piece to its stream's reader, or keeps it until read (counted against the buffer
    /// budget; its ACK waits until it is read).
    mutating func yield(
        _ body: ByteBuffer,
        isComplete: Bool,
        to id: BLIPIncomingID,
        effects: inout Effects
    ) {
        guard var stream = self.streams[id] else {
            self.consumed(id, bytes: body.readableBytes, effects: &effects)  // its reader is gone
            return
        }
        var kept = 0
        if let waiter = stream.waiter, body.readableBytes > 0 || isComplete {
            stream.waiter = nil
            stream.isComplete = isComplete
            if body.readableBytes > 0 {
                // Read at once: it counts as consumed now.
                self.consumed(id, bytes: body.readableBytes, effects: &effects)
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
            self.streams.removeValue(forKey: id)  // nothing left: the reader's next call ends the stream
        } else {
            self.streams[id] = stream
        }
        if kept > 0 { _ = self.charge(kept, effects: &effects) }
    }

    mutating func failStream(_ id: BLIPIncomingID, _ error: any Error, effects: inout Effects) {
        guard var stream = self.streams[id], !stream.isComplete || !stream.chunks.isEmpty else { return }
        if let waiter = stream.waiter {
            stream.waiter = nil
            effects.later { waiter.resume(throwing: error) }
        }
        stream.failure = error
        stream.chunks.removeAll()
        let kept = stream.keptBytes
        stream.keptBytes = 0
        self.streams[id] = stream
        self.release(kept, effects: &effects)
    }

    /// What a reader gets without waiting: a kept piece (now consumed), the end, the stream's failure, or
    /// `alreadyReading` while another reader waits; nil if it has to wait.
    mutating func takeReady(
        _ id: BLIPIncomingID,
        effects: inout Effects
    ) -> Result<ByteBuffer?, any Error>? {
        guard var stream = self.streams[id] else { return .success(nil) }
        if stream.waiter != nil {
            // A second reader would take the first one's place, and the first would wait forever. (Two that
            // arrive at once both pass the first look; if the one turned away is cancelled meanwhile, its
            // cancellation reaches the waiting one: each still gets exactly one answer.)
            return .failure(BLIPConnectionError(.alreadyReading, "another task is already reading this body stream"))
        }
        if let failure = stream.failure {
            self.streams.removeValue(forKey: id)
            return .failure(failure)
        }
        if let chunk = stream.chunks.popFirst() {
            stream.keptBytes -= chunk.readableBytes
            self.consumed(id, bytes: chunk.readableBytes, effects: &effects)
            self.streams[id] = stream
            self.release(chunk.readableBytes, effects: &effects)
            return .success(chunk)
        }
        if stream.isComplete {
            self.streams.removeValue(forKey: id)
            return .success(nil)
        }
        return nil
    }
}
