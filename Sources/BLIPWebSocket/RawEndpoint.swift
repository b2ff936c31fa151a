internal import BLIP
internal import DequeModule
internal import NIOConcurrencyHelpers
internal import NIOCore

/// A raw WebSocket endpoint for measuring the transport without BLIP, and for Autobahn: it echoes every
/// message (text as text, binary as binary). In ``BLIPWebSocketServer/RawEndpointMode/benchmark`` mode it
/// also obeys two text commands used by the benchmark baselines:
/// `sink:N` counts the next N binary bytes without echoing and then answers the text `N`;
/// `source:N` sends N bytes as 16 KiB binary messages, then the text `done`.
/// In ``BLIPWebSocketServer/RawEndpointMode/echo`` mode those are echoed like any other text.
final class RawEndpoint: FrameSink {
    private struct State {
        var outbound: Deque<(ByteBuffer, MessageKind)> = []
        var sinkRemaining = 0
        var sinkTotal = 0
        var sourceRemaining = 0
        var closed = false
    }

    private let state = NIOLockedValueBox(State())
    private let interpretsCommands: Bool
    private static let chunk = ByteBuffer(repeating: 0x5A, count: 16_384)

    init(mode: BLIPWebSocketServer.RawEndpointMode) {
        self.interpretsCommands = mode == .benchmark
    }

    func received(_ message: ByteBuffer, isText: Bool) -> Bool {
        self.state.withLockedValue { state in
            if !self.interpretsCommands {
                state.outbound.append((message, isText ? .text : .binary))
            } else if isText {
                let text = String(buffer: message)
                if text.hasPrefix("sink:"), let count = Int(text.dropFirst(5)) {
                    state.sinkRemaining = count
                    state.sinkTotal = count
                    if count == 0 { state.outbound.append((ByteBuffer(string: "0"), .text)) }
                    return
                }
                if text.hasPrefix("source:"), let count = Int(text.dropFirst(7)) {
                    state.sourceRemaining = count
                    return
                }
                state.outbound.append((message, .text))
            } else if state.sinkRemaining > 0 {
                state.sinkRemaining -= message.readableBytes
                if state.sinkRemaining <= 0 {
                    state.sinkRemaining = 0
                    state.outbound.append((ByteBuffer(string: "\(state.sinkTotal)"), .text))
                }
            } else {
                state.outbound.append((message, .binary))
            }
        }
        return true
    }

    func nextMessage(into buffer: inout ByteBuffer) -> MessageKind? {
        self.state.withLockedValue { state in
            if let (message, kind) = state.outbound.popFirst() {
                buffer.writeImmutableBuffer(message)
                return kind
            }
            guard state.sourceRemaining > 0 else { return nil }
            let size = min(Self.chunk.readableBytes, state.sourceRemaining)
            buffer.writeImmutableBuffer(Self.chunk.getSlice(at: 0, length: size)!)
            state.sourceRemaining -= size
            if state.sourceRemaining == 0 { state.outbound.append((ByteBuffer(string: "done"), .text)) }
            return .binary
        }
    }

    func closed(_ status: BLIPCloseStatus) {
        self.state.withLockedValue { $0.closed = true }
    }
}
