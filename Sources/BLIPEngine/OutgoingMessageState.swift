internal import BLIPWire
internal import DequeModule
internal import NIOCore

/// One message we are sending: its remaining data, where it is (queued, paused, starved, held), and its
/// flow-control counters.
///
/// Its stored properties skip Swift's run-time exclusivity checks, as `BLIPConnectionEngine`'s do, for the
/// same reason: it calls out to no other code, so no two accesses to its state can overlap.
final class OutgoingMessageState: BLIPOutboxEntry {
    let id: BLIPOutgoingID
    let type: BLIPMessageType
    /// The wire number: a request's is assigned at its first frame (0 until then); a reply's is its request's.
    @exclusivity(unchecked) var number: UInt64
    /// Flags on every frame: urgent, no-reply, compressed (requested).
    @exclusivity(unchecked) var flags: BLIPFrameFlags
    @exclusivity(unchecked) var data: BLIPMessageData
    /// Whether `data` holds the rest of the message (false while a streamed body is still coming).
    @exclusivity(unchecked) var isBodyComplete: Bool
    let isStreamed: Bool
    let streamsReply: Bool

    /// Frame bytes after the header (CRC included) sent and acknowledged: the units of ACKs.
    @exclusivity(unchecked) var bytesSent = 0
    @exclusivity(unchecked) var bytesAcknowledged = 0
    @exclusivity(unchecked) var framesSent = 0
    /// Cumulative `bytesSent` after each frame not yet acknowledged, with its send time: for round trips.
    @exclusivity(unchecked) var unacknowledgedFrames: Deque<(bytesSent: Int, time: NIODeadline)> = []
    /// Held back by the send window since the last ACK.
    @exclusivity(unchecked) var wasWindowLimited = false

    @exclusivity(unchecked) var isQueued = false
    @exclusivity(unchecked) var isPaused = false
    /// A reply whose request is still arriving: it may not leave before the request is complete.
    @exclusivity(unchecked) var isHeld = false
    /// Its reply, if any, is to be dropped.
    @exclusivity(unchecked) var isAbandoned = false

    init(
        id: BLIPOutgoingID,
        type: BLIPMessageType,
        number: UInt64,
        flags: BLIPFrameFlags,
        data: BLIPMessageData,
        isBodyComplete: Bool,
        isStreamed: Bool,
        streamsReply: Bool
    ) {
        self.id = id
        self.type = type
        self.number = number
        self.flags = flags
        self.data = data
        self.isBodyComplete = isBodyComplete
        self.isStreamed = isStreamed
        self.streamsReply = streamsReply
    }

    var isUrgent: Bool { self.flags.contains(.urgent) }
    var hasStarted: Bool { self.framesSent > 0 }
    var expectsReply: Bool { self.type == .request && !self.flags.contains(.noReply) }
    var isFinished: Bool { self.isBodyComplete && self.data.readableBytes == 0 && self.hasStarted }
    /// Waiting for more of its streamed body before it can send a frame.
    var isStarved: Bool { !self.isBodyComplete && self.data.readableBytes == 0 }
    var unacknowledgedBytes: Int { self.bytesSent - self.bytesAcknowledged }
}

/// Every message of ours not yet fully sent, by handle: handles are given out in send order and most
/// messages finish in about that order, so a ``RecentKeyTable`` holds them without hashing.
struct OutgoingMessages {
    private var table = RecentKeyTable<OutgoingMessageState>()

    var count: Int { self.table.count }
    var values: [OutgoingMessageState] { self.table.values }

    subscript(id: BLIPOutgoingID) -> OutgoingMessageState? {
        get { self.table[id.rawValue] }
        set { self.table[id.rawValue] = newValue }
    }

    @discardableResult
    mutating func removeValue(forKey id: BLIPOutgoingID) -> OutgoingMessageState? {
        self.table.removeValue(forKey: id.rawValue)
    }

    mutating func removeAll() {
        self.table.removeAll()
    }
}
