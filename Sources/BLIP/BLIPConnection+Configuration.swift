public import BLIPEngine
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
        public var sendWindow = BLIPEngineConfiguration.SendWindow.adaptive(initial: 128_000, maximum: 4 << 20)
        /// The largest incoming property block; more is a protocol violation (LiteCore's limit).
        public var maximumPropertiesSize = BLIPPropertyCodec.defaultMaximumSize
        /// The largest incoming message body. A larger request is answered ERR BLIP/413; a larger reply
        /// fails its request with ``BLIPConnectionError/Code/messageTooLarge``.
        public var maximumIncomingMessageSize = 256 << 20
        /// The most messages the peer may have partly sent at once; more is a protocol violation.
        public var maximumIncomingMessagesInFlight = 1024
        /// The most one frame may inflate to (decompression-bomb guard).
        public var maximumInflatedFrameSize = 16 << 20
        /// Handlers running at once before the connection stops reading from the peer.
        public var maximumConcurrentHandlers = 512
        /// Unhandled requests waiting in ``BLIPConnection/incomingRequests`` before reading stops.
        public var incomingRequestBufferSize = 64
        public var unhandledRequests = UnhandledRequestPolicy.respondNotFound
        /// Whether a handler's error text is sent in its BLIP/501 reply (off: errors may carry internals).
        public var sendsHandlerErrorMessages = false
        /// Whether message bodies may appear in debug logs. Off by default: they may hold documents.
        public var logsMessageBodies = false

        public init() {}

        func engineConfiguration(dialect: BLIPDialect, streamsRequestBodies: Bool) -> BLIPEngineConfiguration {
            var engine = BLIPEngineConfiguration(dialect: dialect)
            if let compressionLevel = self.compressionLevel { engine.encoder.compressionLevel = compressionLevel }
            engine.encoder.skipsIncompressibleData = self.skipsIncompressibleData
            engine.decoder.maximumInflatedFrameSize = self.maximumInflatedFrameSize
            engine.frameSize = self.frameSize
            engine.smallFrameSize = min(4096, self.frameSize)
            engine.sendWindow = self.sendWindow
            engine.maximumPropertiesSize = self.maximumPropertiesSize
            engine.maximumIncomingMessageSize = self.maximumIncomingMessageSize
            engine.maximumIncomingMessagesInFlight = self.maximumIncomingMessagesInFlight
            engine.consumesRequestBodiesManually = streamsRequestBodies
            return engine
        }
    }
}
