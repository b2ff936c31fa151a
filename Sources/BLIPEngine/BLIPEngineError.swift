package import BLIPWire

/// Why the engine refused an operation or closed the connection.
package struct BLIPEngineError: Error, Hashable, Sendable, CustomStringConvertible {
    package enum Code: Hashable, Sendable {
        /// The peer broke a rule that is fatal in go-blip or LiteCore (digest 7.12); the connection closes.
        case protocolViolation
        /// The engine is closed.
        case closed
        /// A message could not be encoded (a property string with NUL, a block over the limit...).
        case invalidMessage
        /// The message this operation names is not known (never queued, finished, or already answered).
        case unknownMessage
        /// A reply to a request that was sent no-reply.
        case noReplyExpected
        /// An incoming message grew past the configured maximum size.
        case messageTooLarge
        /// More messages partly received from the peer than the configured maximum.
        case tooManyMessagesInFlight
        /// A streamed body failed after frames of its message were sent: BLIP has no way to abort a
        /// message, so the connection must close.
        case bodyFailedMidMessage
    }

    package var code: Code
    package var message: String
    /// The wire error behind a protocol violation or an invalid message.
    package var wireError: BLIPWireError?

    package init(_ code: Code, _ message: String, wireError: BLIPWireError? = nil) {
        self.code = code
        self.message = message
        self.wireError = wireError
    }

    package var description: String { "\(self.code): \(self.message)" }

    static func violation(_ message: String) -> BLIPEngineError {
        BLIPEngineError(.protocolViolation, message)
    }
}
