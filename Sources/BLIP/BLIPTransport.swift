public import BLIPWire
public import NIOCore

/// The seam between a connection and the network: a full-duplex channel of BLIP frames (one frame per
/// WebSocket binary message).
///
/// The transport drives the connection from its own serial context (an event loop): it hands each frame
/// received to the ``BLIPTransportSink`` and, whenever it can write, pulls frames from it until it has
/// none or the network is saturated, then flushes. So framing, compression and scheduling happen right at
/// the socket, with no `await` per frame.
public protocol BLIPTransport: AnyObject, Sendable {
    /// The wire dialect, known once the transport is established (from the negotiated subprotocol).
    var dialect: BLIPDialect { get }

    /// Called once by the connection: from now on the transport reports to `sink`.
    func start(_ sink: BLIPTransportSink)

    /// The connection has new frames to send: pull them soon, from the transport's own context.
    func wakeWriter()

    /// Stop handing frames to the sink until ``resumeReading()`` (the application is not keeping up).
    func pauseReading()
    func resumeReading()

    /// Closes the connection; the transport reports ``BLIPTransportSink/closed(_:)-(BLIPCloseStatus)`` once it
    /// has.
    func close(_ reason: BLIPCloseReason)

    /// An executor that runs tasks in the transport's serial context (its event loop), if it has one: see
    /// ``BLIPConnection/taskExecutor``.
    var taskExecutor: (any TaskExecutor)? { get }
}

extension BLIPTransport {
    public var taskExecutor: (any TaskExecutor)? { nil }
}

/// What a transport reports to: the connection's side of the seam. All calls come from the transport's
/// serial context.
public final class BLIPTransportSink: Sendable {
    let core: ConnectionCore

    init(core: ConnectionCore) {
        self.core = core
    }

    /// A frame arrived.
    public func received(_ frame: ByteBuffer) {
        self.core.received(frame)
    }

    /// Appends the next frame to send to `buffer` (after any bytes already there, such as room left for a
    /// WebSocket header); returns false when there is nothing to send now.
    public func nextFrame(into buffer: inout ByteBuffer) -> Bool {
        self.core.nextFrame(into: &buffer)
    }

    /// ``nextFrame(into:)`` that also says whether another frame is ready behind this one (learnt under the
    /// same lock), so that the package's transports stop pulling without one more call that finds nothing.
    package func pullFrame(into buffer: inout ByteBuffer) -> BLIPPulledFrame {
        self.core.pullFrame(into: &buffer)
    }

    /// The transport is closed, as `status` says: by whom, with which code and why.
    public func closed(_ status: BLIPCloseStatus) {
        self.core.transportClosed(status)
    }

    /// The transport is closed; `error` is nil for a normal close. For transports that know no more: a
    /// ``BLIPConnectionError`` carrying a ``BLIPConnectionError/closeStatus`` reports that status; any
    /// other error is a transport failure (1006); nil is a normal close by the peer, or the end of a close
    /// this side asked for.
    public func closed(_ error: (any Error)?) {
        if let status = (error as? BLIPConnectionError)?.closeStatus {
            self.closed(status)
        } else if let error {
            self.closed(
                BLIPCloseStatus(code: .abnormalClosure, reason: "\(error)", initiator: .transport, underlying: error)
            )
        } else {
            self.core.transportClosed(nil)
        }
    }

    /// The network can take more (true) or is full (false): the peer is not reading what we write. While
    /// it is full and many replies wait to be written, the connection stops reading the peer's requests.
    public func writabilityChanged(_ isWritable: Bool) {
        self.core.writabilityChanged(isWritable)
    }
}

/// What one pull from ``BLIPTransportSink`` gave.
package enum BLIPPulledFrame: Equatable, Sendable {
    /// Nothing to send now.
    case none
    /// A frame, and another is ready behind it.
    case frameWithMoreReady
    /// A frame, and nothing more is ready: new work wakes the writer (``BLIPTransport/wakeWriter()``).
    case lastReadyFrame
}
