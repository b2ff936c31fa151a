internal import BLIP
internal import NIOCore

/// What the WebSocket handler hands messages to and pulls messages from: a BLIP connection, or a raw
/// endpoint (benchmark baselines, Autobahn).
protocol FrameSink: AnyObject, Sendable {
    /// A complete WebSocket message arrived. Returns false to refuse it (text sent to BLIP: close 1003).
    func received(_ message: ByteBuffer, isText: Bool) -> Bool
    /// Appends the next message to send to `buffer`; returns its kind (text or binary), or nil if none.
    func nextMessage(into buffer: inout ByteBuffer) -> MessageKind?
    /// ``nextMessage(into:)``, also saying whether it was the last one ready (the handler then stops
    /// pulling until it is woken).
    func pullMessage(into buffer: inout ByteBuffer) -> (kind: MessageKind, isLastReady: Bool)?
    func closed(_ status: BLIPCloseStatus)
    /// The channel can take more writes (true), or is full: the peer is not reading.
    func writabilityChanged(_ isWritable: Bool)
    /// Whether the handler writes what this sink has produced before a long read batch ends
    /// (``BLIPWebSocketHandler/firstEarlyWrite``), or only once it has ended.
    var writesWithinReadBatch: Bool { get }
}

extension FrameSink {
    func pullMessage(into buffer: inout ByteBuffer) -> (kind: MessageKind, isLastReady: Bool)? {
        self.nextMessage(into: &buffer).map { ($0, false) }
    }

    func writabilityChanged(_ isWritable: Bool) {}
    /// One write per read batch, as the raw endpoint (the benchmarks' handler-style baseline) is defined.
    var writesWithinReadBatch: Bool { false }
}

enum MessageKind {
    case binary
    case text
}

/// BLIP frames travel in binary messages only.
final class BLIPFrameSink: FrameSink {
    let sink: BLIPTransportSink

    init(_ sink: BLIPTransportSink) {
        self.sink = sink
    }

    func received(_ message: ByteBuffer, isText: Bool) -> Bool {
        guard !isText else { return false }
        self.sink.received(message)
        return true
    }

    func nextMessage(into buffer: inout ByteBuffer) -> MessageKind? {
        self.sink.nextFrame(into: &buffer) ? .binary : nil
    }

    func pullMessage(into buffer: inout ByteBuffer) -> (kind: MessageKind, isLastReady: Bool)? {
        switch self.sink.pullFrame(into: &buffer) {
        case .none: nil
        case .frameWithMoreReady: (.binary, false)
        case .lastReadyFrame: (.binary, true)
        }
    }

    func closed(_ status: BLIPCloseStatus) {
        self.sink.closed(status)
    }

    func writabilityChanged(_ isWritable: Bool) {
        self.sink.writabilityChanged(isWritable)
    }

    /// Replies leave while a long read batch is still being read: both peers work at once.
    var writesWithinReadBatch: Bool { true }
}

extension BLIPCloseStatus {
    /// What a raw endpoint's reader gets: nothing for a normal close, otherwise the error behind it.
    var failure: (any Error)? {
        guard !self.isNormal else { return nil }
        if let underlying = self.underlying { return underlying }
        return BLIPConnectionError(closedByPeerWith: self.code, reason: self.reason)
            ?? BLIPConnectionError(.connectionClosed, "\(self)", closeStatus: self)
    }
}
