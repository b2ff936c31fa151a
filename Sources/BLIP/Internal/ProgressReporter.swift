internal import NIOConcurrencyHelpers

/// Hands one request's progress to the application's handler: in order, one report at a time, and never
/// under a lock, although reports come from whichever thread moved the request along.
///
/// Every update is merged into the latest value (each field only grows), so updates that race arrive as
/// the larger value. The thread that finds no report under way delivers; the others leave their merged
/// value for it, and it delivers again until nothing is left. A handler that itself causes an update (by
/// cancelling its request) only leaves a value for the delivery that called it.
final class ProgressReporter: Sendable {
    private let handler: BLIPProgressHandler
    /// NIO's lock, as the connection's: ThreadSanitizer follows it (see Docs/Testing.md).
    private let box = NIOLockedValueBox(Box())
    /// False for a no-reply request, which is complete once sent.
    let expectsReply: Bool

    private struct Box {
        var latest = BLIPMessageProgress(state: .queued)
        var delivered: BLIPMessageProgress?
        var isDelivering = false
    }

    init(expectsReply: Bool, _ handler: @escaping BLIPProgressHandler) {
        self.expectsReply = expectsReply
        self.handler = handler
    }

    /// Merges `update` into the latest value and delivers it unless it adds nothing.
    func report(_ update: BLIPMessageProgress) {
        let first = self.box.withLockedValue { box -> BLIPMessageProgress? in
            guard !(box.delivered?.state.isFinal ?? false) else { return nil }
            box.latest.merge(update)
            guard !box.isDelivering, box.latest != box.delivered else { return nil }
            box.isDelivering = true
            box.delivered = box.latest
            return box.latest
        }
        guard var next = first else { return }
        while true {
            self.handler(next)
            let following = self.box.withLockedValue { box -> BLIPMessageProgress? in
                guard box.latest != box.delivered, !(box.delivered?.state.isFinal ?? false) else {
                    box.isDelivering = false
                    return nil
                }
                box.delivered = box.latest
                return box.latest
            }
            guard let following else { return }
            next = following
        }
    }

    func report(_ state: BLIPMessageProgress.State) {
        self.report(BLIPMessageProgress(state: state))
    }
}

extension BLIPMessageProgress {
    /// Takes the larger of each field; a final state is never left for another.
    mutating func merge(_ other: BLIPMessageProgress) {
        if !self.state.isFinal { self.state = max(self.state, other.state) }
        self.bytesSent = max(self.bytesSent, other.bytesSent)
        self.bytesAcknowledged = max(self.bytesAcknowledged, other.bytesAcknowledged)
        self.replyBytesReceived = max(self.replyBytesReceived, other.replyBytesReceived)
    }
}
