internal import BLIPEngine
internal import BLIPWire
internal import Logging
internal import NIOConcurrencyHelpers
internal import NIOCore

/// What a streamed reply is sent with besides its body.
struct StreamedReplyHead: Sendable {
    /// The peer's request it answers.
    let number: UInt64
    let properties: BLIPProperties
    let isCompressed: Bool
}

extension ConnectionCore {
    /// Sends the reply to request `head.number`, pulling `body` as it goes. Runs in its own task under
    /// ``run()``, which cancels it when the connection closes.
    ///
    /// The first piece is pulled before the reply is queued, so that a body failing at once gets ERR
    /// BLIP/500 rather than a half-sent reply. One piece is read ahead, to know which is the last.
    func sendStreamedReply<Body: AsyncSequence>(
        _ head: StreamedReplyHead,
        body: Body
    ) async where Body.Element == ByteBuffer {
        var iterator = body.makeAsyncIterator()
        var next: ByteBuffer?
        do {
            next = try await iterator.next(isolation: #isolation)
        } catch {
            self.replyBodyFailed(head.number, queued: nil, error)
            return
        }
        guard let id = self.enqueueStreamedReply(head) else {
            // Not queued (ERR BLIP/500 went instead, or the connection closed): a close asked for after it
            // follows that.
            self.closeIfAskedAfterReply(to: head.number)
            return
        }
        while true {
            let following: ByteBuffer?
            do {
                following = next == nil ? nil : try await iterator.next(isolation: #isolation)
            } catch {
                self.replyBodyFailed(head.number, queued: id, error)
                return
            }
            let isComplete = following == nil
            do {
                try await self.appendBody(next ?? ByteBuffer(), to: id, isComplete: isComplete)
            } catch {
                // The connection closed, or the engine dropped the reply: pull no more. A close asked for
                // after this reply happens now.
                self.closeIfAskedAfterReply(to: head.number)
                return
            }
            if isComplete {
                self.closeIfAskedAfterReply(to: head.number)
                return
            }
            next = following
        }
    }

    /// Queues the reply with its properties; its body follows piece by piece. Nil if it was not queued
    /// (the connection closed, or the properties could not be encoded and ERR BLIP/500 went instead).
    private func enqueueStreamedReply(_ head: StreamedReplyHead) -> BLIPOutgoingID? {
        let message = BLIPOutgoingMessage(
            .response(toRequest: head.number),
            properties: head.properties,
            body: .streamed,
            compressed: head.isCompressed
        )
        var effects = Effects()
        let id = self.state.withLockedValue { state -> BLIPOutgoingID? in
            guard !state.isClosed else { return nil }
            return state.enqueueReply(message, to: head.number, effects: &effects)
        }
        self.perform(&effects)
        return id
    }

    /// A streamed reply's body threw. A reply none of which has left is replaced by ERR BLIP/500, as a
    /// reply that cannot be encoded is. One already started cannot be aborted in BLIP: the connection
    /// closes with 1011, as for a streamed request body that fails after its first frame. After the
    /// connection closed (which cancels the pulling task) there is nothing left to do.
    private func replyBodyFailed(_ number: UInt64, queued id: BLIPOutgoingID?, _ error: any Error) {
        var effects = Effects()
        self.state.withLockedValue { $0.replyBodyFailed(number, queued: id, error: error, effects: &effects) }
        self.perform(&effects)
    }
}
