public import NIOCore

/// A body produced as it is sent, for a reply (``BLIPResponse/bodyStream``): the connection pulls the
/// sequence only as fast as the peer takes the message (its ACK window), so a reply of any size never has
/// to sit in memory. Sync Gateway's `getAttachment` answers this way.
///
/// The sequence is pulled by the connection's ``BLIPConnection/run()``, after the handler has returned
/// (its handler slot is free again). If it throws before its first piece, the request gets ERR BLIP/500;
/// after that, the reply cannot be aborted (BLIP has no way to), so the connection closes with 1011. If
/// the connection closes first, pulling stops.
public struct BLIPBodySource: Sendable {
    /// Sends the reply `head` describes with this body; type-erases the sequence.
    let send: @Sendable (ConnectionCore, StreamedReplyHead) async -> Void

    public init<Body: AsyncSequence & Sendable>(_ body: Body) where Body.Element == ByteBuffer {
        self.send = { core, head in await core.sendStreamedReply(head, body: body) }
    }
}

extension BLIPResponse {
    /// A reply whose body is produced as it is sent (see ``BLIPBodySource``); `body` stays empty.
    public init<Body: AsyncSequence & Sendable>(
        properties: BLIPProperties = [:],
        bodyStream: Body,
        compressed: Bool = false
    ) where Body.Element == ByteBuffer {
        self.init(properties: properties, compressed: compressed)
        self.bodyStream = BLIPBodySource(bodyStream)
    }
}
