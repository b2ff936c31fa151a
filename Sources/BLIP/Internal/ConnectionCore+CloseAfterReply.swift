internal import BLIPEngine
internal import NIOConcurrencyHelpers

extension ConnectionCore {
    /// Closes with `reason` once the reply to request `number` is queued; a request that expects no reply
    /// has none to wait for, nor one already answered: the connection closes now (after the replies queued).
    func closeAfterReply(to number: UInt64, expectsReply: Bool, _ reason: BLIPCloseReason) {
        var effects = Effects()
        self.state.withLockedValue {
            $0.closeAfterReply(to: number, expectsReply: expectsReply, reason, effects: &effects)
        }
        self.perform(&effects)
    }

    /// ``ConnectionStateMachine/closeIfAskedAfterReply(to:effects:)``, taking the lock.
    func closeIfAskedAfterReply(to number: UInt64) {
        var effects = Effects()
        self.state.withLockedValue { $0.closeIfAskedAfterReply(to: number, effects: &effects) }
        self.perform(&effects)
    }
}
