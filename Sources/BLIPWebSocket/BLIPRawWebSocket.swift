internal import BLIP
internal import DequeModule
internal import Dispatch
package import Logging
internal import NIOConcurrencyHelpers
package import NIOCore
internal import NIOPosix

/// A WebSocket connection carrying plain messages instead of BLIP, over the same transport (the same
/// handler, framing and masking). For measuring the transport on its own (the benchmark baselines, with a
/// server whose ``BLIPWebSocketServer/Configuration/rawEndpoint`` is set) and for conformance tests.
package final class BLIPRawWebSocket: Sendable {
    /// The subprotocol that asks a ``BLIPWebSocketServer`` for its raw endpoint.
    package static let benchmarkSubprotocol = "blip-raw"

    let transport: BLIPWebSocketTransport
    let sink: RawClientSink

    init(transport: BLIPWebSocketTransport, sink: RawClientSink) {
        self.transport = transport
        self.sink = sink
    }

    /// Connects, offering `subprotocols` (none is fine), and starts receiving.
    ///
    /// With `echoes`, every message received is sent straight back (text as text) on the connection's
    /// event loop, the way a conformance suite's client must: ``receive()`` then only reports the close.
    package static func connect(
        to url: String,
        subprotocols: [String] = [benchmarkSubprotocol],
        echoes: Bool = false,
        configuration: BLIPWebSocketClient.Configuration = BLIPWebSocketClient.Configuration(),
        eventLoopGroup: any EventLoopGroup = MultiThreadedEventLoopGroup.singleton,
        logger: Logger = Logger(label: "blip.websocket.raw")
    ) async throws -> BLIPRawWebSocket {
        var configuration = configuration
        configuration.subprotocols = subprotocols
        let sink = RawClientSink(echoes: echoes)
        let transport = try await BLIPWebSocketClient.handshake(
            to: url,
            configuration: configuration,
            rawSink: sink,
            eventLoopGroup: eventLoopGroup,
            logger: logger
        )
        return BLIPRawWebSocket(transport: transport, sink: sink)
    }

    /// The subprotocol the server chose, if any.
    package var subprotocol: String? { self.transport.subprotocol }

    /// Queues a message (binary unless `text`).
    package func send(_ message: ByteBuffer, text: Bool = false) {
        self.sink.enqueue(message, text: text)
        self.transport.wakeWriter()
    }

    /// The next message received; nil once the connection has closed.
    package func receive() async throws -> (message: ByteBuffer, isText: Bool)? {
        try await self.sink.next()
    }

    /// Sends `count` copies of `message` to an echoing peer with `inFlight` outstanding, driven from the
    /// connection's event loop: each echo received sends the next message in the same turn of the loop, and
    /// the replies to one read leave in one flush. No task and no continuation sits on the path, so this is
    /// the ceiling the transport sets for request/reply traffic (the benchmark's handler-style baseline).
    ///
    /// Returns each message's round-trip time, in the order sent. Messages received meanwhile are consumed;
    /// do not call ``receive()`` until it returns.
    package func measureEchoes(of message: ByteBuffer, count: Int, inFlight: Int) async throws -> [Duration] {
        precondition(count > 0 && inFlight > 0)
        let latencies = try await withCheckedThrowingContinuation { continuation in
            self.sink.startEchoes(
                EchoDriver(message: message, count: count, inFlight: inFlight, continuation: continuation)
            )
            self.transport.wakeWriter()
        }
        return latencies.map { .nanoseconds($0) }
    }

    /// How many messages were echoed (with `echoes`).
    package var echoedCount: Int { self.sink.echoedCount }

    /// Starts the close handshake (1000).
    package func close() {
        self.transport.close(.normal)
    }

    /// Returns once the TCP connection has closed (after the close handshake, or when it was lost).
    package func waitUntilClosed() async {
        try? await self.transport.closeFuture.get()
    }
}

/// The client end of a raw connection: messages to send, and received ones waiting to be read.
final class RawClientSink: FrameSink {
    private struct State {
        var outbound: Deque<(ByteBuffer, MessageKind)> = []
        var inbound: Deque<(ByteBuffer, Bool)> = []
        var waiter: CheckedContinuation<(message: ByteBuffer, isText: Bool)?, any Error>?
        var closed = false
        var error: (any Error)?
        var echoed = 0
        var driver: EchoDriver?
    }

    private let state = NIOLockedValueBox(State())
    private let echoes: Bool

    init(echoes: Bool = false) {
        self.echoes = echoes
    }

    var echoedCount: Int { self.state.withLockedValue { $0.echoed } }

    func enqueue(_ message: ByteBuffer, text: Bool) {
        self.state.withLockedValue { $0.outbound.append((message, text ? .text : .binary)) }
    }

    /// Queues the driver's first `inFlight` messages; from now on, received messages go to it.
    func startEchoes(_ driver: EchoDriver) {
        var driver = driver
        let failure = self.state.withLockedValue { state -> (any Error)? in
            if state.closed { return state.error ?? BLIPConnectionError(.connectionClosed, "closed") }
            if state.driver != nil { return BLIPConnectionError(.limitExceeded, "one echo measurement at a time") }
            for _ in 0..<min(driver.inFlight, driver.count) { state.outbound.append((driver.nextMessage(), .binary)) }
            state.driver = driver
            return nil
        }
        if let failure { driver.continuation.resume(throwing: failure) }
    }

    func next() async throws -> (message: ByteBuffer, isText: Bool)? {
        try await withCheckedThrowingContinuation { continuation in
            let ready = self.state.withLockedValue {
                state -> Result<(message: ByteBuffer, isText: Bool)?, any Error>? in
                if let (message, isText) = state.inbound.popFirst() { return .success((message, isText)) }
                if let error = state.error { return .failure(error) }
                if state.closed { return .success(nil) }
                state.waiter = continuation
                return nil
            }
            if let ready { continuation.resume(with: ready) }
        }
    }

    func received(_ message: ByteBuffer, isText: Bool) -> Bool {
        if self.echoes {
            // Queued here, written by the handler's next pump (at the end of this read at the latest).
            self.state.withLockedValue { state in
                state.outbound.append((message, isText ? .text : .binary))
                state.echoed += 1
            }
            return true
        }
        switch self.state.withLockedValue({ state in Self.driveEcho(&state) }) {
        case .noDriver:
            break
        case .consumed:
            return true
        case .finished(let driver):
            driver.continuation.resume(returning: driver.latencies)
            return true
        }
        let waiter = self.state.withLockedValue {
            state -> CheckedContinuation<(message: ByteBuffer, isText: Bool)?, any Error>? in
            guard let waiter = state.waiter else {
                state.inbound.append((message, isText))
                return nil
            }
            state.waiter = nil
            return waiter
        }
        waiter?.resume(returning: (message, isText))
        return true
    }

    private enum EchoOutcome {
        case noDriver
        case consumed
        case finished(EchoDriver)
    }

    /// With an echo driver running: records the echo and queues the next message; the driver is returned
    /// once it has every echo. Without one, `state` is untouched.
    private static func driveEcho(_ state: inout State) -> EchoOutcome {
        // Taken out while it changes, so that its arrays are not copied on write.
        guard var driver = state.driver.take() else { return .noDriver }
        if driver.echoed() { return .finished(driver) }
        if driver.hasMoreToSend { state.outbound.append((driver.nextMessage(), .binary)) }
        state.driver = driver
        return .consumed
    }

    func nextMessage(into buffer: inout ByteBuffer) -> MessageKind? {
        self.state.withLockedValue { state in
            guard let (message, kind) = state.outbound.popFirst() else { return nil }
            buffer.writeImmutableBuffer(message)
            return kind
        }
    }

    func closed(_ status: BLIPCloseStatus) {
        let error = status.failure
        let (waiter, driver) = self.state.withLockedValue { state in
            state.closed = true
            state.error = error
            return (state.waiter.take(), state.driver.take())
        }
        driver?.continuation.resume(throwing: error ?? BLIPConnectionError(.connectionClosed, "closed"))
        if let error { waiter?.resume(throwing: error) } else { waiter?.resume(returning: nil) }
    }
}

/// The state of ``BLIPRawWebSocket/measureEchoes(of:count:inFlight:)``: what is left to send, and when each
/// message still awaiting its echo was sent (echoes come back in order).
struct EchoDriver {
    let message: ByteBuffer
    let count: Int
    let inFlight: Int
    let continuation: CheckedContinuation<[Int64], any Error>
    private var sent = 0
    private var sendTimes: Deque<UInt64> = []
    private(set) var latencies: [Int64] = []

    init(message: ByteBuffer, count: Int, inFlight: Int, continuation: CheckedContinuation<[Int64], any Error>) {
        self.message = message
        self.count = count
        self.inFlight = inFlight
        self.continuation = continuation
        self.latencies.reserveCapacity(count)
    }

    var hasMoreToSend: Bool { self.sent < self.count }

    mutating func nextMessage() -> ByteBuffer {
        self.sent += 1
        self.sendTimes.append(DispatchTime.now().uptimeNanoseconds)
        return self.message
    }

    /// Records one echo; true once every message has come back.
    mutating func echoed() -> Bool {
        if let sentAt = self.sendTimes.popFirst() {
            self.latencies.append(Int64(DispatchTime.now().uptimeNanoseconds - sentAt))
        }
        return self.latencies.count >= self.count
    }
}
