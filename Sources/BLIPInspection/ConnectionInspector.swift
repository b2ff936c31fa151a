internal import BLIPWebSocket
internal import BLIPWire
internal import Foundation
internal import NIOCore

/// Watches the two byte streams of one proxied connection and reports what they carry: the handshake,
/// then each direction's WebSocket messages decoded as BLIP in the dialect the upstream chose. It sees
/// each chunk once the proxy has sent it on (after each read batch's flush) and never changes it;
/// whatever it fails to understand stops its reports for that direction, not the relay. Confined to the
/// connection's event loop.
final class ConnectionInspector {
    typealias Direction = BLIPInspectingProxy.Direction

    let id: Int
    private let configuration: BLIPInspectingProxy.Configuration
    private let report: @Sendable (BLIPInspectingProxy.Event) -> Void
    private let captureCounter: CaptureCounter
    private var request: RelayedHTTPHead?
    private var phase = Phase.awaitingResponse(ByteBuffer())
    private let clientToServer: DirectionInspector
    private let serverToClient: DirectionInspector
    private var capture: BLIPFrameCapture?
    private(set) var bytesFromClient = 0
    private(set) var bytesFromServer = 0

    private enum Phase {
        /// The response head's bytes so far; client bytes meanwhile wait in the direction's observer.
        case awaitingResponse(ByteBuffer)
        case webSocket
        /// A refusal, or bytes the inspector cannot read: relayed, not reported.
        case notWebSocket
    }

    init(
        id: Int,
        configuration: BLIPInspectingProxy.Configuration,
        captureCounter: CaptureCounter,
        report: @escaping @Sendable (BLIPInspectingProxy.Event) -> Void
    ) {
        self.id = id
        self.configuration = configuration
        self.captureCounter = captureCounter
        self.report = report
        // Relaying only, nothing reads binary messages: their payloads are skipped, not gathered.
        let readsBinary = configuration.decodes || configuration.captureDirectory != nil
        self.clientToServer = DirectionInspector(
            .clientToServer,
            maximumMessageSize: configuration.maximumMessageSize,
            readsBinaryMessages: readsBinary
        )
        self.serverToClient = DirectionInspector(
            .serverToClient,
            maximumMessageSize: configuration.maximumMessageSize,
            readsBinaryMessages: readsBinary
        )
    }

    func emit(_ kind: BLIPInspectingProxy.Event.Kind, at time: Date = Date()) {
        self.report(BLIPInspectingProxy.Event(connection: self.id, time: time, kind: kind))
    }

    /// The client's request head, as the client sent it, and its length in bytes.
    func requestHead(_ head: RelayedHTTPHead, length: Int) {
        self.request = head
        self.bytesFromClient += length
    }

    /// Bytes the client sent after its request head, once they are forwarded.
    func clientBytes(_ bytes: ByteBuffer) {
        self.bytesFromClient += bytes.readableBytes
        switch self.phase {
        case .webSocket:
            self.inspect(bytes, self.clientToServer)
        case .awaitingResponse:
            // A client may not send frames before the 101; one that does is not followed.
            if !self.clientToServer.stopped {
                self.stop(self.clientToServer, "the client sent data before the upgrade was answered")
            }
        case .notWebSocket:
            break
        }
    }

    /// Bytes the upstream sent, once they are forwarded.
    func serverBytes(_ bytes: ByteBuffer) {
        self.bytesFromServer += bytes.readableBytes
        switch self.phase {
        case .webSocket:
            self.inspect(bytes, self.serverToClient)
        case .notWebSocket:
            break
        case .awaitingResponse(var head):
            head.writeImmutableBuffer(bytes)
            let parsed: (RelayedHTTPHead, length: Int)?
            do {
                parsed = try RelayedHTTPHead.parse(head, limit: self.configuration.maximumHeadSize)
            } catch {
                self.phase = .notWebSocket
                self.emit(.decodingStopped(.serverToClient, "unreadable response head: \(error)"))
                return
            }
            guard let (response, length) = parsed else {
                self.phase = .awaitingResponse(head)
                return
            }
            head.moveReaderIndex(forwardBy: length)
            self.responded(response, rest: head)
        }
    }

    private func responded(_ response: RelayedHTTPHead, rest: ByteBuffer) {
        let request = self.request ?? RelayedHTTPHead(startLine: "", fields: HTTPFields())
        let upgraded = response.status == 101
        let subprotocol = response["Sec-WebSocket-Protocol"]
        let dialect: BLIPDialect? =
            if !upgraded { nil } else if let subprotocol { BLIPSubprotocol.dialect(for: subprotocol) } else {
                self.configuration.dialectWithoutSubprotocol
            }
        let redactions = self.configuration.redactedHeaders
        self.emit(
            .handshake(
                request: request.redacting(redactions),
                response: response.redacting(redactions),
                dialect: dialect
            )
        )
        guard upgraded else {
            self.phase = .notWebSocket
            return
        }
        self.phase = .webSocket
        if let folder = self.configuration.captureDirectory {
            do {
                let capture = try BLIPFrameCapture.forNewConnection(
                    under: folder,
                    dialect: dialect ?? .blip3,
                    counter: self.captureCounter
                )
                capture.write(named: "handshake-request.txt", request.redacting(redactions).description)
                capture.write(named: "handshake-response.txt", response.redacting(redactions).description)
                self.capture = capture
            } catch {
                self.emit(.decodingStopped(.serverToClient, "cannot capture to \(folder): \(error)"))
            }
        }
        if self.configuration.decodes, let dialect {
            let digested = self.configuration.maximumDigestedBodySize
            self.clientToServer.decoder = BLIPTrafficDecoder(dialect: dialect, maximumDigestedBodySize: digested)
            self.serverToClient.decoder = BLIPTrafficDecoder(dialect: dialect, maximumDigestedBodySize: digested)
        }
        if rest.readableBytes > 0 { self.inspect(rest, self.serverToClient) }
    }

    private func inspect(_ bytes: ByteBuffer, _ direction: DirectionInspector) {
        guard !direction.stopped else { return }
        // Everything in one chunk arrived together: its frames' events share one reading of each clock, taken
        // when the first of them is reported (three readings per message showed in profiles of pipelined
        // traffic).
        var arrival: ChunkArrival?
        do {
            try direction.observer.observe(bytes) { event in self.handle(event, direction, arrival: &arrival) }
        } catch {
            self.stop(direction, "\(error)")
        }
        // Not inside the observer's own call: release what it buffered once the direction is given up.
        if direction.stopped { direction.observer = WebSocketStreamObserver(maximumMessageSize: 0) }
    }

    private func handle(
        _ event: WebSocketStreamObserver.Event,
        _ direction: DirectionInspector,
        arrival: inout ChunkArrival?
    ) {
        guard !direction.stopped else { return }
        let time = arrival ?? ChunkArrival()
        arrival = time
        switch event {
        case .ping(let payload):
            self.emit(.control(direction.direction, .ping(payload)), at: time.date)
        case .pong(let payload):
            self.emit(.control(direction.direction, .pong(payload)), at: time.date)
        case .close(let code, let reason):
            self.emit(.control(direction.direction, .close(code: code, reason: reason)), at: time.date)
        case .message(let payload, isText: true):
            self.emit(.control(direction.direction, .text(payload)), at: time.date)
        case .message(let payload, isText: false):
            self.capture?.record(payload, clientToServer: direction.direction == .clientToServer)
            guard let decoder = direction.decoder else { return }
            do {
                let step = try decoder.decode(payload, at: time.deadline)
                if case .ack(let count) = step.frame.kind {
                    self.emit(.ack(direction.direction, step.frame.header, byteCount: count), at: time.date)
                }
                if let message = step.message {
                    let duration = Duration.nanoseconds((time.deadline - message.started).nanoseconds)
                    self.emit(.message(direction.direction, message, duration: duration), at: time.date)
                }
            } catch {
                self.stop(direction, "\(error)")
            }
        }
    }

    private func stop(_ direction: DirectionInspector, _ reason: String) {
        direction.stopped = true
        direction.decoder = nil
        self.emit(.decodingStopped(direction.direction, reason))
    }

    /// Both sockets have closed: the last report, and the capture's files written.
    func finish() {
        let incomplete =
            (self.clientToServer.decoder?.incompleteMessages.map { "c2s \($0)" } ?? [])
            + (self.serverToClient.decoder?.incompleteMessages.map { "s2c \($0)" } ?? [])
        self.emit(
            .closed(
                bytesFromClient: self.bytesFromClient,
                bytesFromServer: self.bytesFromServer,
                incomplete: incomplete
            )
        )
    }
}

/// When a chunk of relayed bytes arrived, by the wall clock (for the log) and the monotonic one (for
/// durations).
struct ChunkArrival {
    let date = Date()
    let deadline = NIODeadline.now()
}

/// One direction's observer and decoder.
final class DirectionInspector {
    let direction: BLIPInspectingProxy.Direction
    var observer: WebSocketStreamObserver
    var decoder: BLIPTrafficDecoder?
    var stopped = false

    init(_ direction: BLIPInspectingProxy.Direction, maximumMessageSize: Int, readsBinaryMessages: Bool) {
        self.direction = direction
        self.observer = WebSocketStreamObserver(
            maximumMessageSize: maximumMessageSize,
            readsBinaryMessages: readsBinaryMessages
        )
    }
}
