package import BLIPWire

/// How an engine frames, compresses, flow-controls and limits one connection.
package struct BLIPEngineConfiguration: Sendable {
    /// How much unacknowledged data one outgoing message may have in flight.
    package enum SendWindow: Hashable, Sendable {
        /// Always this many bytes (go-blip and LiteCore: 128 000).
        case fixed(Int)
        /// Starts at `initial` and grows while the message is held back by the window and the round trip
        /// (a frame's send to the ACK covering it) stays near its minimum, up to `maximum`.
        case adaptive(initial: Int, maximum: Int)
    }

    package var dialect: BLIPDialect
    package var encoder: BLIPFrameEncoder.Configuration
    package var decoder = BLIPFrameDecoder.Configuration()

    /// The budget of a frame, header and CRC included.
    package var frameSize = 16_384
    /// The budget of a normal message's frame while an urgent message waits behind it.
    package var smallFrameSize = 4_096
    /// An ACK is sent after at least this many bytes of a message have been received (and consumed).
    package var ackInterval = 50_000
    package var sendWindow = SendWindow.adaptive(initial: 128_000, maximum: 4 << 20)

    /// The largest property block accepted; more is fatal, as in LiteCore.
    package var maximumPropertiesSize = BLIPPropertyCodec.defaultMaximumSize
    /// The largest body accepted in one incoming message. A larger request is drained and answered
    /// with ERR BLIP/413; a larger response fails its request. The connection stays up.
    package var maximumIncomingMessageSize = 256 << 20
    /// The most messages the peer may have partly sent at once; more is fatal.
    package var maximumIncomingMessagesInFlight = 1024
    /// Bytes of an oversized message drained after it passed ``maximumIncomingMessageSize``; a peer that
    /// sends more of it fails the connection (``BLIPEngineError/Code/messageTooLarge``, thrown), so that a
    /// message that never ends cannot keep the connection busy forever.
    package var maximumDrainedBytes = 16 << 20
    /// Whether an oversized request is answered ERR BLIP/413 as soon as it passes the limit, instead of
    /// once its last frame has arrived. Off by default: LiteCore treats a reply to a request it is still
    /// sending as fatal (digest trap 17); go-blip and this package accept it.
    package var repliesEarlyToOversizedRequests = false
    /// Whether incoming requests' bodies count as consumed only when the application says so
    /// (``BLIPConnectionEngine/consumed(_:bytes:)``), holding back ACKs while it lags. Off, a body counts
    /// as consumed once delivered. Replies are consumed manually when their request asked to stream them.
    package var consumesRequestBodiesManually = false
    /// Whether replies' bodies count as consumed only when the application says so, like requests with
    /// ``consumesRequestBodiesManually`` (a connection that budgets what it buffers holds back ACKs of
    /// whole bodies too).
    package var consumesReplyBodiesManually = false
    /// A streamed outgoing body is asked for more while less than this much of it is queued.
    package var streamedBodyLowWatermark = 64 * 1024

    package init(dialect: BLIPDialect = .blip3) {
        self.dialect = dialect
        self.encoder = BLIPFrameEncoder.Configuration(dialect: dialect)
    }

    var initialSendWindow: Int {
        switch self.sendWindow {
        case .fixed(let size): size
        case .adaptive(let initial, _): initial
        }
    }
}
