package import BLIPWire
package import NIOCore

/// An incoming message once its properties have arrived.
package struct BLIPIncomingMessage: Sendable {
    package var id: BLIPIncomingID
    /// `.request`, `.response` or `.error`.
    package var type: BLIPMessageType
    /// The flags of its first frame (compressed, urgent, no-reply), without more-coming.
    package var flags: BLIPFrameFlags
    package var properties: BLIPProperties
    /// The body bytes that arrived with the properties: the whole body if ``isComplete``.
    package var body: ByteBuffer
    package var isComplete: Bool
    /// For a reply: the request of ours it answers.
    package var request: BLIPOutgoingID?

    package var expectsReply: Bool { self.type == .request && !self.flags.contains(.noReply) }
}

/// What an incoming frame produced for the layer above.
package enum BLIPEngineEvent: Sendable {
    /// A message's properties have arrived (with the body bytes so far; all of it if complete). Its body
    /// bytes count as unconsumed until ``BLIPConnectionEngine/consumed(_:bytes:)``.
    case messageStarted(BLIPIncomingMessage)
    /// More body bytes of a started message.
    case bodyReceived(BLIPIncomingID, ByteBuffer, isComplete: Bool)
    /// An incoming message failed while the connection stays up (it grew past the size limit). Its
    /// remaining frames are drained; a request that expects a reply is answered with ERR BLIP/413.
    case messageFailed(BLIPIncomingID, request: BLIPOutgoingID?, BLIPEngineError)
}

/// The result of ``BLIPConnectionEngine/receive(_:now:)``.
package struct BLIPReceiveResult: Sendable {
    package var event: BLIPEngineEvent?
    /// Frames became ready to send (an ACK is due, a paused message resumed, an automatic reply).
    package var wakeWriter: Bool
    /// An ACK raised the count of acknowledged bytes of one of our messages.
    package var acknowledged: BLIPAcknowledgement?

    package init(event: BLIPEngineEvent? = nil, wakeWriter: Bool = false, acknowledged: BLIPAcknowledgement? = nil) {
        self.event = event
        self.wakeWriter = wakeWriter
        self.acknowledged = acknowledged
    }
}

/// The peer's ACK of one of our messages: how many of its frame data bytes it has received so far.
package struct BLIPAcknowledgement: Hashable, Sendable {
    package var message: BLIPOutgoingID
    package var bytes: Int

    package init(message: BLIPOutgoingID, bytes: Int) {
        self.message = message
        self.bytes = bytes
    }
}

/// A frame the engine appended to the output buffer.
package struct BLIPSentFrame: Hashable, Sendable {
    package var header: BLIPFrameHeader
    package var length: Int
    /// The message this frame belongs to; nil for ACK frames.
    package var message: BLIPOutgoingID?
    package var isFirstFrame: Bool
    /// The message's last frame: it has been handed over whole.
    package var isLastFrame: Bool
    /// Frame data bytes of the message sent so far, this frame's included (the unit of ACKs).
    package var messageBytesSent: Int = 0
}

/// The result of ``BLIPConnectionEngine/nextFrame(into:now:)``.
package enum BLIPNextFrame: Hashable, Sendable {
    case frame(BLIPSentFrame)
    /// Nothing can be sent now: the out-box is empty, or every queued message waits for an ACK or for
    /// more of its streamed body.
    case idle
}

/// Everything a closing connection leaves unfinished, to be failed at once.
package struct BLIPEngineClosure: Sendable {
    /// Our requests whose reply will never come (queued, partly sent, or sent and awaiting the reply).
    package var failedRequests: [BLIPOutgoingID] = []
    /// Our messages whose sending did not complete (any kind; includes requests listed above).
    package var failedSends: [BLIPOutgoingID] = []
    /// Messages the peer had partly sent.
    package var incompleteIncoming: [BLIPIncomingID] = []
}

/// What cancelling an outgoing message did (BLIP has no cancel frame).
package enum BLIPCancelResult: Hashable, Sendable {
    /// It had not started: it was removed, and never gets a number.
    case removed
    /// It had started: the rest of it is still sent (a half-sent message would stay open at the peer
    /// forever), and its reply, if any, will be dropped.
    case finishing
    /// It was fully sent: its reply, when it comes, will be dropped.
    case replyAbandoned
    /// Nothing to cancel.
    case unknown
}

/// Where one of our messages is, for observation (tests, diagnostics).
package enum BLIPOutgoingStatus: Hashable, Sendable {
    /// In the out-box, waiting for its turn to send a frame.
    case queued
    /// Paused: the send window is full until the peer ACKs.
    case waitingForACK
    /// A streamed body with nothing queued: waiting for ``BLIPConnectionEngine/appendBody(_:_:isComplete:)``.
    case waitingForBody
    /// A reply waiting for its request to arrive whole.
    case held
}
