internal import BLIPWire
internal import DequeModule

/// One message the peer is sending us, between its first and last frame.
///
/// Its stored properties skip Swift's run-time exclusivity checks, as `BLIPConnectionEngine`'s do, for the
/// same reason: it calls out to no other code, so no two accesses to its state can overlap.
final class IncomingMessageState {
    let id: BLIPIncomingID
    let type: BLIPMessageType
    let flags: BLIPFrameFlags
    @exclusivity(unchecked) var reader: BLIPMessageReader
    /// For a reply: our request.
    let request: BLIPOutgoingID?
    @exclusivity(unchecked) var headDelivered = false
    /// Too large, or a reply nobody wants: remaining frames are read and dropped.
    @exclusivity(unchecked) var isDiscarding = false
    /// Bytes drained unread (frame bytes, or what a BLIP 3 frame inflated to, whichever is larger): since
    /// the message was refused when it is too large, since its start otherwise.
    @exclusivity(unchecked) var bytesDrained = 0
    @exclusivity(unchecked) var isTooLarge = false
    /// An oversized request already answered ERR BLIP/413 (before its last frame).
    @exclusivity(unchecked) var wasRefusedEarly = false
    /// Body bytes count as consumed once delivered (the application buffers them).
    @exclusivity(unchecked) var consumesAutomatically = true

    /// Frame bytes after the header received, and the value of the last ACK sent.
    @exclusivity(unchecked) var bytesReceived = 0
    @exclusivity(unchecked) var bytesAcknowledged = 0
    /// Frame bytes whose body bytes have all been consumed: what may be acknowledged.
    @exclusivity(unchecked) var bytesConsumable = 0
    /// Body bytes delivered and consumed.
    @exclusivity(unchecked) var bodyDelivered = 0
    @exclusivity(unchecked) var bodyConsumed = 0
    /// For frames not yet consumed: the cumulative frame bytes and body bytes once each is consumed.
    @exclusivity(unchecked) var unconsumedFrames: Deque<(bytesReceived: Int, bodyDelivered: Int)> = []

    init(
        id: BLIPIncomingID,
        type: BLIPMessageType,
        flags: BLIPFrameFlags,
        reader: BLIPMessageReader,
        request: BLIPOutgoingID?
    ) {
        self.id = id
        self.type = type
        self.flags = flags
        self.reader = reader
        self.request = request
    }

    /// Records `count` more body bytes consumed; returns whether the consumable frame bytes grew.
    func consume(_ count: Int) -> Bool {
        self.bodyConsumed = min(self.bodyDelivered, self.bodyConsumed + count)
        var grew = false
        while let first = self.unconsumedFrames.first, first.bodyDelivered <= self.bodyConsumed {
            self.bytesConsumable = first.bytesReceived
            self.unconsumedFrames.removeFirst()
            grew = true
        }
        return grew
    }

    /// Frame bytes received but not yet consumed: what this message holds in memory, in wire units.
    var unconsumedBytes: Int { self.bytesReceived - self.bytesConsumable }
}
