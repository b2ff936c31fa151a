import BLIP
import BLIPEngine
import BLIPWire
import NIOConcurrencyHelpers
import NIOCore
import Synchronization

/// A transport the test drives by hand: it delivers frames to the connection when told to, pulls the
/// frames the connection sends with ``drain()``, and records pauses and closes. With a
/// ``BLIPConnectionEngine`` as the other side it lets a test play any peer, byte for byte.
final class ManualTransport: BLIPTransport {
    struct Record {
        var sink: BLIPTransportSink?
        var closeReasons: [BLIPCloseReason] = []
        var readingPaused = false
        var pauses = 0
        var resumes = 0
        var reportedClosed = false
        /// Runs inside `pauseReading()`, before the pause takes effect (to interleave another thread's call).
        var pauseHook: (@Sendable () -> Void)?
    }

    let dialect: BLIPDialect
    private let record = NIOLockedValueBox(Record())

    init(dialect: BLIPDialect = .blip3) {
        self.dialect = dialect
    }

    func start(_ sink: BLIPTransportSink) {
        self.record.withLockedValue { $0.sink = sink }
    }

    func wakeWriter() {}

    func pauseReading() {
        if let hook = self.record.withLockedValue({ $0.pauseHook }) { hook() }
        self.record.withLockedValue {
            $0.readingPaused = true
            $0.pauses += 1
        }
    }

    func resumeReading() {
        self.record.withLockedValue {
            $0.readingPaused = false
            $0.resumes += 1
        }
    }

    /// Sets what runs inside the next `pauseReading()` calls.
    func setPauseHook(_ hook: (@Sendable () -> Void)?) {
        self.record.withLockedValue { $0.pauseHook = hook }
    }

    /// Closing completes at once: the connection hears that the transport closed.
    func close(_ reason: BLIPCloseReason) {
        let sink = self.record.withLockedValue { record -> BLIPTransportSink? in
            record.closeReasons.append(reason)
            guard !record.reportedClosed else { return nil }
            record.reportedClosed = true
            return record.sink
        }
        sink?.closed(nil)
    }

    /// The peer closed the connection normally.
    func peerClosed() {
        let sink = self.record.withLockedValue { record -> BLIPTransportSink? in
            guard !record.reportedClosed else { return nil }
            record.reportedClosed = true
            return record.sink
        }
        sink?.closed(nil)
    }

    /// The peer vanished (or sent something that ended the connection at the transport).
    func fail(_ error: any Error) {
        let sink = self.record.withLockedValue { record -> BLIPTransportSink? in
            guard !record.reportedClosed else { return nil }
            record.reportedClosed = true
            return record.sink
        }
        sink?.closed(error)
    }

    /// Hands `frame` to the connection, as if it had arrived.
    func deliver(_ frame: ByteBuffer) {
        let sink = self.record.withLockedValue { $0.reportedClosed ? nil : $0.sink }
        sink?.received(frame)
    }

    /// Every frame the connection has ready now (it is asked until it has none).
    func drain(limit: Int = 100_000) -> [ByteBuffer] {
        guard let sink = self.record.withLockedValue({ $0.sink }) else { return [] }
        var frames: [ByteBuffer] = []
        while frames.count < limit {
            var frame = ByteBuffer()
            guard sink.nextFrame(into: &frame) else { break }
            frames.append(frame)
        }
        return frames
    }

    var closeReasons: [BLIPCloseReason] { self.record.withLockedValue { $0.closeReasons } }
    var isReadingPaused: Bool { self.record.withLockedValue { $0.readingPaused } }
    var pauseCount: Int { self.record.withLockedValue { $0.pauses } }
    var resumeCount: Int { self.record.withLockedValue { $0.resumes } }
}

/// The peer of a ``ManualTransport``: an engine whose frames the test passes across by hand.
final class ScriptedPeer {
    let engine: BLIPConnectionEngine
    let transport: ManualTransport
    /// Events the peer's engine reported, in order.
    private(set) var events: [BLIPEngineEvent] = []

    init(transport: ManualTransport, configuration: BLIPEngineConfiguration? = nil) {
        self.transport = transport
        self.engine = BLIPConnectionEngine(
            configuration: configuration ?? BLIPEngineConfiguration(dialect: transport.dialect)
        )
    }

    /// Sends everything the peer has queued to the connection.
    func flush() throws {
        var frame = ByteBuffer()
        while case .frame = try self.engine.nextFrame(into: &frame, now: .now()) {
            self.transport.deliver(frame)
            frame = ByteBuffer()
        }
    }

    /// Passes what the connection sent to the peer's engine.
    func receive() throws {
        for frame in self.transport.drain() {
            if let event = try self.engine.receive(frame, now: .now()).event { self.events.append(event) }
        }
    }

    /// Replies and errors the peer has received whole, by request number.
    var replies: [(number: UInt64, type: BLIPMessageType, properties: BLIPProperties, body: ByteBuffer)] {
        self.events.compactMap { event in
            guard case .messageStarted(let message) = event, message.type != .request, message.isComplete else {
                return nil
            }
            return (message.id.number, message.type, message.properties, message.body)
        }
    }
}
