internal import BLIPEngine
internal import DequeModule
internal import NIOConcurrencyHelpers
internal import NIOCore
internal import Synchronization

extension ConnectionStateMachine {
    /// The application waits for the next request no handler took.
    mutating func waitForUnhandledRequest(
        continuation: WaiterContinuation<BLIPIncomingRequest?, Never>,
        effects: inout Effects
    ) {
        if let request = self.popUnhandled(effects: &effects) {
            effects.later { continuation.resume(returning: request) }
        } else if self.isClosed || self.unhandledWaiter != nil {
            effects.later { continuation.resume(returning: nil) }  // closed, or one reader at a time
        } else {
            self.unhandledWaiter = continuation
        }
    }

    /// The oldest request waiting in the incoming-request buffer; taking it may let reading resume.
    mutating func popUnhandled(effects: inout Effects) -> BLIPIncomingRequest? {
        guard let request = self.unhandled.popFirst() else { return nil }
        self.updateReading(effects: &effects)
        return request
    }
}
