package import BLIPWire
internal import DequeModule
package import NIOCore

/// The BLIP protocol for one connection, without I/O: it turns messages to send into frames, and frames
/// received into messages, in any of the three dialects.
///
/// Sans-IO: no sockets, no `await`, no clock (times come in as arguments), no logging. Every operation
/// returns what the driver has to do. The driver calls ``nextFrame(into:now:)`` whenever the transport
/// can take a frame, and ``receive(_:now:)`` for every frame that arrives; after a thrown
/// ``BLIPEngineError/Code/protocolViolation`` it closes the transport and calls ``close()`` to learn what
/// to fail. Not thread-safe: one engine belongs to one event loop, or sits behind one lock.
///
/// Its stored properties (and those of its per-message state and its frame encoder and decoder) are marked
/// `@exclusivity(unchecked)`: the engine calls out to no other code, so one access to its state can never
/// overlap another, and Swift's run-time checks of that cost 8 % of a round trip's instructions
/// (Docs/BenchmarkLog.md, "Instructions per round trip").
package final class BLIPConnectionEngine {
    package let configuration: BLIPEngineConfiguration
    package var dialect: BLIPDialect { self.configuration.dialect }

    let encoder: BLIPFrameEncoder
    let decoder: BLIPFrameDecoder
    @exclusivity(unchecked) var isClosed = false
    /// Set by a fatal error: the engine refuses further work until closed.
    @exclusivity(unchecked) var failure: BLIPEngineError?
    /// `failure != nil`, kept beside it: the hot path asks this for every frame, and comparing the optional
    /// error with nil copies it.
    @exclusivity(unchecked) var hasFailed = false

    // MARK: Sending

    @exclusivity(unchecked) var outbox = BLIPOutbox<OutgoingMessageState>()
    /// ACKs go out ahead of every message frame.
    @exclusivity(unchecked) var pendingACKs: Deque<(type: BLIPMessageType, number: UInt64, count: Int)> = []
    /// Every message of ours not yet fully sent.
    @exclusivity(unchecked) var outgoing = OutgoingMessages()
    /// Started, unfinished messages by wire identity, for matching ACKs.
    @exclusivity(unchecked) var sending: [BLIPIncomingID: OutgoingMessageState] = [:]
    /// Our sent requests whose reply has not started arriving, by number.
    @exclusivity(unchecked) var awaitingReply = RecentKeyTable<PendingReply>()
    @exclusivity(unchecked) var nextOutgoingID: UInt64 = 1
    @exclusivity(unchecked) var lastRequestNumberSent: UInt64 = 0
    @exclusivity(unchecked) var window: SendWindowEstimator
    /// Message data of our replies not yet started: what the peer's requests made us hold for it.
    @exclusivity(unchecked) var replyBytesQueued = 0
    /// Incomplete property blocks of incoming messages (they may straddle frames).
    @exclusivity(unchecked) var propertyBytesBuffered = 0
    /// After a fatal error: complete replies may still be framed, nothing else (see
    /// ``finishRepliesAfterFailure()``).
    @exclusivity(unchecked) var isFinishingReplies = false

    struct PendingReply {
        let request: BLIPOutgoingID
        var isAbandoned: Bool
        let streamsReply: Bool
    }

    // MARK: Receiving

    /// Messages the peer has started and not finished.
    @exclusivity(unchecked) var incoming: [BLIPIncomingID: IncomingMessageState] = [:]
    @exclusivity(unchecked) var lastRequestNumberReceived: UInt64 = 0
    /// The peer's requests that we may still answer, by number.
    @exclusivity(unchecked) var unanswered = RecentKeyTable<UnansweredRequest>()

    struct UnansweredRequest {
        let isUrgent: Bool
        var isComplete: Bool
        /// A reply given before the request was complete, held until it is.
        var heldReply: OutgoingMessageState?
    }

    package init(configuration: BLIPEngineConfiguration = BLIPEngineConfiguration()) {
        self.configuration = configuration
        var encoderConfiguration = configuration.encoder
        encoderConfiguration.maximumPropertiesSize = configuration.maximumPropertiesSize
        self.encoder = BLIPFrameEncoder(dialect: configuration.dialect, configuration: encoderConfiguration)
        self.decoder = BLIPFrameDecoder(dialect: configuration.dialect, configuration: configuration.decoder)
        self.window = SendWindowEstimator(configuration.sendWindow)
    }

    // MARK: - Inspection

    /// Whether ``nextFrame(into:now:)`` would produce a frame now.
    package var hasFrameToSend: Bool {
        !self.isClosed && !self.hasFailed && !(self.pendingACKs.isEmpty && self.outbox.isEmpty)
    }

    /// The current send window (bytes one message may have unacknowledged).
    package var sendWindowSize: Int { self.window.size }

    /// The largest send window so far (what a peer may still have to hold after the window shrank).
    package var peakSendWindowSize: Int { self.window.peak }

    /// The last measured round trip from a frame's send to the ACK covering it.
    package var lastRoundTrip: TimeAmount? { self.window.lastRoundTrip }

    /// Messages of ours not yet fully sent.
    package var outgoingCount: Int { self.outgoing.count }

    /// Our requests still waiting for their reply to start.
    package var awaitingReplyCount: Int { self.awaitingReply.count }

    /// Messages the peer has partly sent.
    package var incomingCount: Int { self.incoming.count }

    /// The lowest-numbered request of the peer's whose first frame has arrived but whose properties have
    /// not all: the driver has not heard of it yet (a property block can straddle frames, so a later
    /// request can start before it), but it will. Requests being drained unread are not counted: the
    /// driver never hears of those. Nil when there is none (the common case costs one emptiness check).
    package var firstRequestAwaitingProperties: UInt64? {
        guard !self.incoming.isEmpty else { return nil }
        var lowest: UInt64?
        for (id, message) in self.incoming
        where id.isRequest && !message.headDelivered && !message.isDiscarding && id.number < (lowest ?? .max) {
            lowest = id.number
        }
        return lowest
    }

    /// Whether the reply to the peer's request `number` waits for the rest of the request (it was given
    /// before the request's last frame arrived).
    package func isReplyHeld(toRequest number: UInt64) -> Bool {
        self.unanswered[number]?.heldReply != nil
    }

    /// Whether the peer's request `number` still expects a reply none of which is queued.
    package func awaitsReply(toRequest number: UInt64) -> Bool {
        guard let request = self.unanswered[number] else { return false }
        return request.heldReply == nil
    }

    /// Requests of the peer that expect a reply none of which is queued yet, and those whose reply waits
    /// for the rest of the request.
    package var unansweredCount: Int { self.unanswered.count }

    /// Bytes of our replies (and ERRs) queued whose first frame has not left. A peer that sends requests
    /// without reading the replies makes this grow; the driver can stop reading while it is large.
    package var queuedReplyBytes: Int { self.replyBytesQueued }

    /// Bytes of incoming property blocks held until they are complete: what the engine itself buffers for
    /// the peer's unfinished messages (bodies are the driver's).
    package var bufferedPropertyBytes: Int { self.propertyBytesBuffered }

    /// Bytes produced by decompression of incoming frames and bodies so far.
    package var bytesInflated: Int { self.decoder.bytesInflated }

    /// Frame bytes of an incoming message that have arrived but whose body has not been consumed: what
    /// it holds in memory, in the units flow control counts.
    package func unconsumedBytes(of id: BLIPIncomingID) -> Int {
        self.incoming[id]?.unconsumedBytes ?? 0
    }

    /// Where one of our messages is; nil once it has been fully sent (or was never queued).
    package func status(of id: BLIPOutgoingID) -> BLIPOutgoingStatus? {
        guard let state = self.outgoing[id] else { return nil }
        if state.isHeld { return .held }
        if state.isPaused { return .waitingForACK }
        if state.isQueued { return .queued }
        return .waitingForBody
    }

    /// Whether one of our requests is waiting for its reply to start (nil: unknown or already replied).
    package func isAwaitingReply(_ id: BLIPOutgoingID) -> Bool {
        self.awaitingReply.values.contains { $0.request == id && !$0.isAbandoned }
    }

    /// Counters of the frame encoder (compression decisions).
    package var encoderStatistics: BLIPFrameEncoder.Statistics { self.encoder.statistics }

    // MARK: - Closing

    /// Closes the engine and returns everything unfinished, to be failed at once. Idempotent.
    package func close() -> BLIPEngineClosure {
        guard !self.isClosed else { return BLIPEngineClosure() }
        self.isClosed = true
        var closure = BLIPEngineClosure()
        var failed = Set<BLIPOutgoingID>()
        for state in self.outgoing.values.sorted(by: { $0.id < $1.id }) {
            closure.failedSends.append(state.id)
            if state.expectsReply && !state.isAbandoned && failed.insert(state.id).inserted {
                closure.failedRequests.append(state.id)
            }
        }
        for pending in self.awaitingReply.values.sorted(by: { $0.request < $1.request })
        where !pending.isAbandoned && failed.insert(pending.request).inserted {
            closure.failedRequests.append(pending.request)
        }
        // Replies already arriving for our requests fail those requests too.
        for message in self.incoming.values.sorted(by: { $0.id.number < $1.id.number }) {
            closure.incompleteIncoming.append(message.id)
            if let request = message.request, !message.isDiscarding, failed.insert(request).inserted {
                closure.failedRequests.append(request)
            }
        }
        _ = self.outbox.removeAll()
        self.replyBytesQueued = 0
        self.propertyBytesBuffered = 0
        self.pendingACKs.removeAll()
        self.outgoing.removeAll()
        self.sending.removeAll()
        self.awaitingReply.removeAll()
        self.incoming.removeAll()
        self.unanswered.removeAll()
        return closure
    }

    /// After a fatal error (the peer broke the protocol), lets the replies already queued whole still be
    /// framed, ignoring the send window, so that answers to the peer's earlier, valid requests go out
    /// before the connection closes. Nothing else is sent: no ACKs, no requests, no streamed or held
    /// replies. The driver decides how many bytes it writes this way, then calls ``close()``.
    package func finishRepliesAfterFailure() {
        guard self.hasFailed else { return }
        self.finishQueuedReplies()
    }

    /// Before a close the driver was asked to make right after a reply: as after a failure, only the replies
    /// already queued whole are framed from now on (ignoring the send window), then the driver calls
    /// ``close()``.
    package func finishQueuedReplies() {
        guard !self.isClosed, !self.isFinishingReplies else { return }
        self.isFinishingReplies = true
        self.pendingACKs.removeAll()
        var wasQueued = Set<BLIPOutgoingID>()
        for state in self.outbox.removeAll() {
            state.isQueued = false
            wasQueued.insert(state.id)
        }
        for state in self.outgoing.values.sorted(by: { $0.id < $1.id })
        where state.type != .request && state.isBodyComplete && (wasQueued.contains(state.id) || state.isPaused) {
            state.isPaused = false
            self.queue(state, isNew: !state.hasStarted)
        }
    }

    func checkUsable() throws(BLIPEngineError) {
        if self.hasFailed, let failure { throw failure }
        if self.isClosed { throw BLIPEngineError(.closed, "the connection is closed") }
    }

    /// Records a fatal error: the engine refuses further work and the driver must close.
    func fail(_ error: BLIPEngineError) -> BLIPEngineError {
        self.failure = error
        self.hasFailed = true
        return error
    }
}
