internal import BLIPEngine
internal import BLIPWire

extension BLIPConnection {
    /// What to do with a request whose `Profile` no handler serves.
    public enum UnhandledRequestPolicy: Hashable, Sendable {
        /// Answer ERR BLIP/404, as go-blip and LiteCore do.
        case respondNotFound
        /// Hand it to ``BLIPConnection/incomingRequests``, where it must be answered.
        case deliver
    }

    public struct Configuration: Sendable {
        /// The largest frame sent, header and CRC included (16 KiB; 4 KiB for a normal message while an
        /// urgent one waits behind it).
        public var frameSize = 16_384
        /// zlib level for compressed messages (0 turns compression off); nil: 6 (5 in the seed dialect).
        public var compressionLevel: Int32?
        /// Send data raw when compressing it would not pay (it looks random, or gzip is not smaller).
        public var skipsIncompressibleData = true
        public var sendWindow = BLIPSendWindow.adaptive(initial: 128_000, maximum: 4 << 20)
        /// The largest incoming property block; more is a protocol violation (LiteCore's limit).
        public var maximumPropertiesSize = BLIPPropertyCodec.defaultMaximumSize
        /// The largest incoming message body. A larger request is answered ERR BLIP/413; a larger reply
        /// fails its request with ``BLIPConnectionError/Code/messageTooLarge``. Bodies read whole (not
        /// streamed) are also limited to ``incomingBufferBudget``. Gzip bodies stop inflating at the limit.
        public var maximumIncomingMessageSize = 256 << 20
        /// Bytes of an oversized message drained after it passed ``maximumIncomingMessageSize``; a peer that
        /// sends more of it is disconnected (close code 1009).
        public var maximumDrainedBytes = 16 << 20
        /// Answer an oversized request ERR BLIP/413 as soon as it passes the limit rather than once its last
        /// frame has arrived. Off by default: LiteCore treats a reply to a request it is still sending as
        /// fatal; go-blip and this package accept it.
        public var repliesEarlyToOversizedRequests = false
        /// The most messages the peer may have partly sent at once; more closes the connection (1008).
        public var maximumIncomingMessagesInFlight = 1024
        /// The most one frame may inflate to (decompression-bomb guard).
        public var maximumInflatedFrameSize = 16 << 20
        /// Bytes the peer may make this connection hold: whole bodies being assembled, requests waiting for
        /// or held by a handler, unread pieces of streamed bodies. Past it, ACKs of whole bodies stop (the
        /// peer's flow control holds it back) and new requests wait or are refused (ERR BLIP/503).
        public var incomingBufferBudget = 64 << 20
        /// Past this many buffered bytes the peer is ignoring flow control: the connection closes (1008,
        /// ``BLIPConnectionError/Code/limitExceeded``). Twice the budget leaves room for the one message
        /// that may always finish, so honest peers never reach it.
        public var incomingBufferHardLimit = 128 << 20
        /// Handlers running at once. Requests beyond wait in arrival order for a free slot; the connection
        /// keeps reading, so running handlers that wait for the peer (a streamed body, a reply) go on.
        public var maximumConcurrentHandlers = 512
        /// Unhandled requests waiting in ``BLIPConnection/incomingRequests`` before reading pauses.
        public var incomingRequestBufferSize = 64
        /// Bytes of replies waiting to be written beyond which, while the peer is not reading them (the
        /// socket is full), the connection stops reading the peer's requests.
        public var maximumQueuedReplyBytes = 8 << 20
        public var unhandledRequests = UnhandledRequestPolicy.respondNotFound
        /// How long every request waits for its reply unless its send call says otherwise; nil waits as long
        /// as the connection is open. A timed-out request is cancelled and throws
        /// ``BLIPConnectionError/Code/timedOut``.
        public var requestTimeout: Duration?
        /// Whether a handler's error text is sent in its BLIP/501 reply (off: errors may carry internals).
        public var sendsHandlerErrorMessages = false
        /// Whether message bodies may appear in debug logs. Off by default: they may hold documents.
        public var logsMessageBodies = false
        /// Spans for requests sent and handled, and the trace context between peers
        /// (``TracingConfiguration``). Off by default.
        public var tracing = TracingConfiguration()
        /// A budget shared with other connections (a server's), on top of ``incomingBufferBudget``.
        package var sharedBudget: SharedBufferBudget?
        /// Told, after the lock, how many requests for profiles with no handler arrived (the tool's
        /// `serve` counts them without a task per connection).
        package var unhandledRequestObserver: (@Sendable (Int) -> Void)?

        public init() {}

        func engineConfiguration(dialect: BLIPDialect) -> BLIPEngineConfiguration {
            var engine = BLIPEngineConfiguration(dialect: dialect)
            if let compressionLevel = self.compressionLevel { engine.encoder.compressionLevel = compressionLevel }
            engine.encoder.skipsIncompressibleData = self.skipsIncompressibleData
            engine.decoder.maximumInflatedFrameSize = self.maximumInflatedFrameSize
            engine.frameSize = self.frameSize
            engine.smallFrameSize = min(4096, self.frameSize)
            switch self.sendWindow {
            case .fixed(let bytes): engine.sendWindow = .fixed(bytes)
            case .adaptive(let initial, let maximum): engine.sendWindow = .adaptive(initial: initial, maximum: maximum)
            }
            engine.maximumPropertiesSize = self.maximumPropertiesSize
            engine.maximumIncomingMessageSize = self.maximumIncomingMessageSize
            engine.maximumIncomingMessagesInFlight = self.maximumIncomingMessagesInFlight
            engine.maximumDrainedBytes = self.maximumDrainedBytes
            engine.repliesEarlyToOversizedRequests = self.repliesEarlyToOversizedRequests
            // The connection says when bodies are consumed: as read for streams, and for whole bodies as
            // buffered, unless its buffer budget is exceeded (see ConnectionStateMachine+Backpressure).
            engine.consumesRequestBodiesManually = true
            engine.consumesReplyBodiesManually = true
            return engine
        }
    }
}
