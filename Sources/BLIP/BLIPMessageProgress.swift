/// Where one of our requests is, from queued to its reply's last byte: what a `progress` handler of the
/// send APIs is given (LiteCore's `MessageProgress` is the model).
///
/// Reports come in order and never overlap, and every value only grows. Close reports may be merged
/// into one when they come faster than the handler returns. Each request gets exactly one report whose
/// ``state`` is final (``State/complete`` or ``State/failed``), and none after it; that one may arrive
/// just after the send call has returned or thrown.
public struct BLIPMessageProgress: Hashable, Sendable {
    /// The stages of a request, in order.
    public enum State: Int, Comparable, Sendable, CustomStringConvertible {
        /// Waiting for its first frame to leave.
        case queued
        /// Some frames have left, not all.
        case sending
        /// Sent whole; no reply has started arriving.
        case awaitingReply
        /// The reply (or an ERR) has started arriving.
        case receivingReply
        /// Done: the reply or ERR arrived whole, or a no-reply request was sent whole.
        case complete
        /// It ended any other way: cancelled, timed out, the connection closed, the reply was too large,
        /// its streamed body or streamed reply was given up.
        case failed

        public static func < (lhs: State, rhs: State) -> Bool { lhs.rawValue < rhs.rawValue }

        /// Whether nothing follows this state.
        public var isFinal: Bool { self >= .complete }

        public var description: String {
            switch self {
            case .queued: "queued"
            case .sending: "sending"
            case .awaitingReply: "awaiting reply"
            case .receivingReply: "receiving reply"
            case .complete: "complete"
            case .failed: "failed"
            }
        }
    }

    public var state: State
    /// Bytes of the request handed to the transport: its properties and body as framed (compressed when
    /// the request is, with each frame's checksum), which is what ACKs count; frame headers not included.
    public var bytesSent: Int
    /// Of ``bytesSent``, what the peer has acknowledged. ACKs come only while a request larger than the
    /// ACK interval (50 000 bytes) is still being sent, and never in the seed dialect, so this can stay
    /// below ``bytesSent`` for good.
    public var bytesAcknowledged: Int
    /// Body bytes of the reply (or ERR) received so far, decompressed.
    public var replyBytesReceived: Int

    public init(state: State, bytesSent: Int = 0, bytesAcknowledged: Int = 0, replyBytesReceived: Int = 0) {
        self.state = state
        self.bytesSent = bytesSent
        self.bytesAcknowledged = bytesAcknowledged
        self.replyBytesReceived = replyBytesReceived
    }
}

/// Called with each report on a request's progress. It runs on the connection's thread and holds up
/// the connection while it runs: keep it short (record the value, yield it to a stream).
public typealias BLIPProgressHandler = @Sendable (BLIPMessageProgress) -> Void
