/// Counters of one connection: what crossed the wire and what compression did.
public struct BLIPConnectionStatistics: Hashable, Sendable {
    public var framesSent = 0
    public var framesReceived = 0
    /// Frame bytes (headers, bodies, CRCs) sent and received: the bytes on the wire, WebSocket framing aside.
    public var bytesSent = 0
    public var bytesReceived = 0
    /// Data fed to compression, and what came out of it (this side's outgoing messages).
    public var bytesBeforeCompression = 0
    public var bytesAfterCompression = 0
    /// Frames or bodies sent raw because compressing them would not have paid.
    public var compressionSkipped = 0
    /// The current send window (bytes one message may have unacknowledged).
    public var sendWindow = 0
    /// Bytes the peer makes the connection hold now (see ``BLIPConnection/Configuration/incomingBufferBudget``),
    /// and the most it has held.
    public var bufferedIncomingBytes = 0
    public var peakBufferedIncomingBytes = 0
    /// Times reading paused because handlers or the incoming-request buffer were behind.
    public var readPausesForBacklog = 0
    /// Times reading paused because replies piled up for a peer that was not reading them.
    public var readPausesForUnreadReplies = 0
    /// Times reading paused because a budget shared with other connections (a server's) was exceeded and
    /// this connection held more than its share.
    public var readPausesForSharedBudget = 0
    /// Requests answered ERR BLIP/503 because the connection was full and could not pause reading.
    public var requestsRefusedBusy = 0
    /// Requests answered ERR BLIP/503 because they arrived during a graceful close.
    public var requestsRefusedClosing = 0
    /// Requests that waited for a free handler slot.
    public var requestsQueuedForHandler = 0
}
