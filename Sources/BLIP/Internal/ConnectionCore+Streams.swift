internal import BLIPEngine
internal import CoreMetrics
internal import DequeModule
internal import NIOCore
internal import Synchronization

extension ConnectionCore {
    /// Hands a body piece to its stream's reader (or keeps it until read).
    static func yield(
        _ body: ByteBuffer,
        isComplete: Bool,
        to id: BLIPIncomingID,
        _ state: inout State,
        effects: inout Effects
    ) {
        guard var stream = state.streams[id] else {
            _ = state.engine.consumed(id, bytes: body.readableBytes)  // its reader is gone
            return
        }
        if let waiter = stream.waiter, body.readableBytes > 0 || isComplete {
            stream.waiter = nil
            stream.isComplete = isComplete
            if body.readableBytes > 0 {
                // Read at once: it counts as consumed now.
                _ = state.engine.consumed(id, bytes: body.readableBytes)
                effects.later { waiter.resume(returning: body) }
            } else {
                effects.later { waiter.resume(returning: nil) }
            }
        } else {
            if body.readableBytes > 0 { stream.chunks.append(body) }
            stream.isComplete = isComplete
        }
        if stream.isComplete && stream.chunks.isEmpty {
            state.streams.removeValue(forKey: id)  // nothing left: the reader's next call ends the stream
        } else {
            state.streams[id] = stream
        }
    }

    static func failStream(_ state: inout State, _ id: BLIPIncomingID, _ error: any Error, effects: inout Effects) {
        guard var stream = state.streams[id], !stream.isComplete || !stream.chunks.isEmpty else { return }
        if let waiter = stream.waiter {
            stream.waiter = nil
            effects.later { waiter.resume(throwing: error) }
        }
        stream.failure = error
        stream.chunks.removeAll()
        state.streams[id] = stream
    }

    /// The next piece of a body stream; nil at its end.
    func nextChunk(of id: BLIPIncomingID) async throws -> ByteBuffer? {
        try await withTaskCancellationHandler {
            try await withCheckedThrowingContinuation { (continuation: CheckedContinuation<ByteBuffer?, any Error>) in
                var effects = Effects()
                self.state.withLock { state in
                    guard var stream = state.streams[id] else {
                        effects.later { continuation.resume(returning: nil) }
                        return
                    }
                    if let failure = stream.failure {
                        state.streams.removeValue(forKey: id)
                        effects.later { continuation.resume(throwing: failure) }
                        return
                    }
                    if let chunk = stream.chunks.popFirst() {
                        effects.wakeWriter = state.engine.consumed(id, bytes: chunk.readableBytes)
                        state.streams[id] = stream
                        effects.later { continuation.resume(returning: chunk) }
                        return
                    }
                    if stream.isComplete {
                        state.streams.removeValue(forKey: id)
                        effects.later { continuation.resume(returning: nil) }
                        return
                    }
                    if Task.isCancelled {
                        effects.later { continuation.resume(throwing: CancellationError()) }
                        return
                    }
                    stream.waiter = continuation
                    state.streams[id] = stream
                }
                self.perform(effects)
            }
        } onCancel: {
            var effects = Effects()
            self.state.withLock { state in
                if let waiter = state.streams[id]?.waiter {
                    state.streams[id]?.waiter = nil
                    effects.later { waiter.resume(throwing: CancellationError()) }
                }
            }
            self.perform(effects)
        }
    }

    /// Nobody will read the rest of this body: drop what is kept and let the rest drain.
    func abandonStream(_ id: BLIPIncomingID) {
        var effects = Effects()
        self.state.withLock { state in
            guard let stream = state.streams.removeValue(forKey: id) else { return }
            let kept = stream.chunks.reduce(0) { $0 + $1.readableBytes }
            effects.wakeWriter = state.engine.consumed(id, bytes: kept)
            if case .streamed = state.inbound[id] { state.inbound[id] = .discarded }
        }
        self.perform(effects)
    }
}
