internal import BLIPEngine
internal import BLIPWire
internal import Logging
internal import NIOConcurrencyHelpers
internal import NIOCore

/// Replies whose body is an `AsyncSequence` (``BLIPBodySource``), pulled under flow control exactly like a
/// streamed request body: a piece is asked for only when the engine has less than its low watermark
/// queued, and the engine sends only as far as the peer's ACKs allow.
extension ConnectionStateMachine {
    /// A streamed reply's body threw (see `ConnectionCore.replyBodyFailed`).
    mutating func replyBodyFailed(
        _ number: UInt64,
        queued id: BLIPOutgoingID?,
        error: any Error,
        effects: inout Effects
    ) {
        guard !self.isClosed else { return }
        self.log(
            .error,
            "the body of the reply to request #\(number) failed",
            ["blip.error": "\(error)"],
            effects: &effects
        )
        if let id {
            do throws(BLIPEngineError) {
                guard try self.engine.cancel(id) == .removed else { return }
            } catch {
                self.fatal(error, byPeer: false, effects: &effects)
                return
            }
        }
        let failure = BLIPError(code: .internalError, message: "the reply body failed")
        self.enqueueReply(failure, to: number, effects: &effects)
        self.closeIfAskedAfterReply(to: number, effects: &effects)
    }
}
