public import BLIP
public import BLIPWire
internal import NIOCore
internal import Synchronization

/// A `BLIPTransport` over an upgraded WebSocket channel. Every call hops to the channel's event loop
/// (or runs at once when already on it), where `BLIPWebSocketHandler` does the work.
public final class BLIPWebSocketTransport: BLIPTransport {
    public let dialect: BLIPDialect
    /// The negotiated subprotocol, if any (none in the seed dialect).
    public let subprotocol: String?
    /// The server's 101 response, on the client side (nil on the server's).
    public let handshakeResponse: BLIPHandshakeResponse?
    let eventLoop: any EventLoop
    let handler: NIOLoopBound<BLIPWebSocketHandler>
    /// The channel's event loop as a task executor (see `BLIPConnection.taskExecutor`).
    public let taskExecutor: (any TaskExecutor)?
    /// Coalesces writer wake-ups into one pump per turn of the event loop.
    private let wakeScheduled = Atomic<Bool>(false)

    /// On a server's connection, the request it was upgraded from; nil on a client's.
    public let upgradeRequest: BLIPUpgradeRequest?
    /// Completes once the channel has closed.
    let closeFuture: EventLoopFuture<Void>

    init(
        dialect: BLIPDialect,
        subprotocol: String?,
        handler: BLIPWebSocketHandler,
        channel: any Channel,
        upgradeRequest: BLIPUpgradeRequest? = nil,
        handshakeResponse: BLIPHandshakeResponse? = nil
    ) {
        self.dialect = dialect
        self.subprotocol = subprotocol
        self.upgradeRequest = upgradeRequest
        self.handshakeResponse = handshakeResponse
        self.eventLoop = channel.eventLoop
        self.taskExecutor = EventLoopTaskExecutor(channel.eventLoop)
        self.closeFuture = channel.closeFuture
        self.handler = NIOLoopBound(handler, eventLoop: channel.eventLoop)
    }

    public func start(_ sink: BLIPTransportSink) {
        self.onLoop { $0.start(BLIPFrameSink(sink)) }
    }

    /// Frames are pulled in a task of their own, even on the event loop: every reply that handlers produce
    /// in one turn of the loop then leaves in one batch and one flush, not one system call each.
    public func wakeWriter() {
        if self.eventLoop.inEventLoop {
            self.handler.value.wake()
            return
        }
        guard !self.wakeScheduled.exchange(true, ordering: .acquiringAndReleasing) else { return }
        self.eventLoop.execute {
            self.wakeScheduled.store(false, ordering: .releasing)
            self.handler.value.pump()
        }
    }

    public func pauseReading() {
        self.onLoop { $0.setReading(false) }
    }

    public func resumeReading() {
        self.onLoop { $0.setReading(true) }
    }

    public func close(_ reason: BLIPCloseReason) {
        self.onLoop { $0.close(reason) }
    }

    private func onLoop(_ body: @escaping @Sendable (BLIPWebSocketHandler) -> Void) {
        if self.eventLoop.inEventLoop {
            body(self.handler.value)
        } else {
            self.eventLoop.execute { body(self.handler.value) }
        }
    }
}
