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
}
