internal import BLIPEngine
internal import NIOCore

/// Progress reports of our requests (``BLIPMessageProgress``). A request with a progress handler is in
/// `state.progress` from its queueing until its reply starts, then in `state.replyProgress` until the
/// reply's last frame; every way out of those tables reports a final state. Reports go out after the
/// lock, before the caller's continuation is resumed by the same operation. Each function first checks
/// that its table is not empty: without progress handlers, that is all the hot path pays.
extension ConnectionCore {
    struct ReplyProgress {
        let reporter: ProgressReporter
        var bytesReceived: Int
    }

    func progressQueued(
        _ id: BLIPOutgoingID,
        _ reporter: ProgressReporter,
        _ state: inout State,
        effects: inout Effects
    ) {
        state.progress[id] = reporter
        effects.later { reporter.report(.queued) }
    }

    /// A frame of message `id` left. A no-reply request is complete with its last frame.
    func progressSent(_ frame: BLIPSentFrame, of id: BLIPOutgoingID, _ state: inout State, effects: inout Effects) {
        guard !state.progress.isEmpty, let reporter = state.progress[id] else { return }
        var stage: BLIPMessageProgress.State = frame.isLastFrame ? .awaitingReply : .sending
        if frame.isLastFrame && !reporter.expectsReply {
            stage = .complete
            state.progress.removeValue(forKey: id)
        }
        let update = BLIPMessageProgress(state: stage, bytesSent: frame.messageBytesSent)
        effects.later { reporter.report(update) }
    }

    func progressAcknowledged(_ ack: BLIPAcknowledgement, _ state: inout State, effects: inout Effects) {
        guard !state.progress.isEmpty, let reporter = state.progress[ack.message] else { return }
        let update = BLIPMessageProgress(state: .sending, bytesAcknowledged: ack.bytes)
        effects.later { reporter.report(update) }
    }

    /// The reply to `request` has started arriving as `reply`; its completion is reported separately.
    func progressReplyStarted(
        _ reply: BLIPIncomingMessage,
        to request: BLIPOutgoingID,
        _ state: inout State,
        effects: inout Effects
    ) {
        guard !state.progress.isEmpty, let reporter = state.progress.removeValue(forKey: request) else { return }
        let bytes = reply.body.readableBytes
        state.replyProgress[reply.id] = ReplyProgress(reporter: reporter, bytesReceived: bytes)
        let update = BLIPMessageProgress(state: .receivingReply, replyBytesReceived: bytes)
        effects.later { reporter.report(update) }
    }

    func progressReplyReceived(
        _ id: BLIPIncomingID,
        bytes: Int,
        isComplete: Bool,
        _ state: inout State,
        effects: inout Effects
    ) {
        guard !state.replyProgress.isEmpty, var progress = state.replyProgress[id] else { return }
        progress.bytesReceived += bytes
        if isComplete {
            state.replyProgress.removeValue(forKey: id)
        } else {
            state.replyProgress[id] = progress
        }
        let update = BLIPMessageProgress(
            state: isComplete ? .complete : .receivingReply,
            replyBytesReceived: progress.bytesReceived
        )
        let reporter = progress.reporter
        effects.later { reporter.report(update) }
    }

    func progressFailed(request id: BLIPOutgoingID, _ state: inout State, effects: inout Effects) {
        guard !state.progress.isEmpty, let reporter = state.progress.removeValue(forKey: id) else { return }
        effects.later { reporter.report(.failed) }
    }

    func progressFailed(reply id: BLIPIncomingID, _ state: inout State, effects: inout Effects) {
        guard !state.replyProgress.isEmpty, let progress = state.replyProgress.removeValue(forKey: id) else { return }
        effects.later { progress.reporter.report(.failed) }
    }

    /// The connection closed: whatever has not finished has failed.
    func progressFailedAll(_ state: inout State, effects: inout Effects) {
        guard !state.progress.isEmpty || !state.replyProgress.isEmpty else { return }
        let reporters = Array(state.progress.values) + state.replyProgress.values.map(\.reporter)
        state.progress.removeAll()
        state.replyProgress.removeAll()
        effects.later {
            for reporter in reporters { reporter.report(.failed) }
        }
    }
}
