internal import BLIPEngine
internal import NIOConcurrencyHelpers
internal import NIOCore

extension ConnectionCore {

    /// The shared budget is back within its limit: withheld ACKs and paused reading are decided again.
    func sharedBudgetHasRoom() {
        var effects = Effects()
        self.state.withLockedValue { $0.sharedBudgetHasRoom(effects: &effects) }
        self.perform(&effects)
    }

    /// The network's room changed: while it is full and replies pile up, the peer is not reading them, so
    /// its requests are not read either (each would add a reply).
    func writabilityChanged(_ isWritable: Bool) {
        var effects = Effects()
        self.state.withLockedValue { state in
            guard !state.isClosed else { return }
            state.isWritable = isWritable
            state.updateReplyBacklog(effects: &effects)
        }
        self.perform(&effects)
    }
}
