internal import BLIPEngine
internal import NIOConcurrencyHelpers
internal import Synchronization

/// A graceful close: nothing new starts (requests that expect a reply get ERR BLIP/503), what is in flight
/// finishes, up to a deadline; then the connection closes.
///
/// In flight means: a message of ours queued or being sent (requests, replies, streamed bodies), a request
/// of ours waiting for its reply, a message from the peer still arriving, a handler running or waiting for
/// a slot, and a request of the peer's handed to the application and not yet answered. Every operation that
/// can end one of these ends in ``perform(_:)``, which then checks (only while a graceful close waits).
extension ConnectionStateMachine {

    /// Nothing in flight either way, no handler running or waiting, and no request of the peer's that owes
    /// a reply (the engine counts those from their first frame until their reply is queued, including the
    /// ones handed to the application as ``BLIPIncomingRequest``).
    func isQuiet() -> Bool {
        self.engine.outgoingCount == 0 && self.engine.awaitingReplyCount == 0 && self.engine.incomingCount == 0
            && self.runningHandlers == 0 && self.pendingWork.isEmpty && self.order.isEmpty
            && self.engine.unansweredCount == 0
    }
}
