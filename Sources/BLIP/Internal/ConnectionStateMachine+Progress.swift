internal import BLIPEngine
internal import NIOCore

/// Progress reports of our requests (``BLIPMessageProgress``). A request with a progress handler is in
/// `progress` from its queueing until its reply starts, then in `replyProgress` until the
/// reply's last frame; every way out of those tables reports a final state. Reports go out after the
/// lock, before the caller's continuation is resumed by the same operation. Each function first checks
/// that its table is not empty: without progress handlers, that is all the hot path pays.
extension ConnectionStateMachine {
    /// A reply whose request reports progress, while it arrives.
    struct ReplyProgress {
        let reporter: ProgressReporter
        var bytesReceived: Int
    }

    mutating func progressQueued(
        _ id: BLIPOutgoingID,
        _ reporter: ProgressReporter,
        effects: inout Effects
    ) {
        self.progress[id] = reporter
        effects.later { reporter.report(.queued) }
    }

    /// A frame of message `id` left. A no-reply request is complete with its last frame.
    mutating func progressSent(_ frame: BLIPSentFrame, of id: BLIPOutgoingID, effects: inout Effects) {
        guard !self.progress.isEmpty, let reporter = self.progress[id] else { return }
        var stage: BLIPMessageProgress.State = frame.isLastFrame ? .awaitingReply : .sending
        if frame.isLastFrame && !reporter.expectsReply {
            stage = .complete
            self.progress.removeValue(forKey: id)
        }
        let update = BLIPMessageProgress(state: stage, bytesSent: frame.messageBytesSent)
        effects.later { reporter.report(update) }
    }

    mutating func progressAcknowledged(_ ack: BLIPAcknowledgement, effects: inout Effects) {
        guard !self.progress.isEmpty, let reporter = self.progress[ack.message] else { return }
        let update = BLIPMessageProgress(state: .sending, bytesAcknowledged: ack.bytes)
        effects.later { reporter.report(update) }
    }

    /// The reply to `request` has started arriving as `reply`; its completion is reported separately.
    mutating func progressReplyStarted(
        _ reply: BLIPIncomingMessage,
        to request: BLIPOutgoingID,
        effects: inout Effects
    ) {
        guard !self.progress.isEmpty, let reporter = self.progress.removeValue(forKey: request) else { return }
        let bytes = reply.body.readableBytes
        self.replyProgress[reply.id] = ReplyProgress(reporter: reporter, bytesReceived: bytes)
        let update = BLIPMessageProgress(state: .receivingReply, replyBytesReceived: bytes)
        effects.later { reporter.report(update) }
    }

    mutating func progressReplyReceived(
        _ id: BLIPIncomingID,
        bytes: Int,
        isComplete: Bool,
        effects: inout Effects
    ) {
        guard !self.replyProgress.isEmpty, var progress = self.replyProgress[id] else { return }
        progress.bytesReceived += bytes
        if isComplete {
            self.replyProgress.removeValue(forKey: id)
        } else {
            self.replyProgress[id] = progress
        }
        let update = BLIPMessageProgress(
            state: isComplete ? .complete : .receivingReply,
            replyBytesReceived: progress.bytesReceived
        )
        let reporter = progress.reporter
        effects.later { reporter.report(update) }
    }

    mutating func progressFailed(request id: BLIPOutgoingID, effects: inout Effects) {
        guard !self.progress.isEmpty, let reporter = self.progress.removeValue(forKey: id) else { return }
        effects.later { reporter.report(.failed) }
    }

    mutating func progressFailed(reply id: BLIPIncomingID, effects: inout Effects) {
        guard !self.replyProgress.isEmpty, let progress = self.replyProgress.removeValue(forKey: id) else { return }
        effects.later { progress.reporter.report(.failed) }
    }

    /// The connection closed: whatever has not finished has failed.
    mutating func progressFailedAll(effects: inout Effects) {
        guard !self.progress.isEmpty || !self.replyProgress.isEmpty else { return }
        let reporters = Array(self.progress.values) + self.replyProgress.values.map(\.reporter)
        self.progress.removeAll()
        self.replyProgress.removeAll()
        effects.later {
            for reporter in reporters { reporter.report(.failed) }
        }
    }
}
