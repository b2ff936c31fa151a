import NIOCore
import Testing

@testable import BLIPInspection
@testable import BLIPWebSocket

@Suite("the proxy's frame reader, on a stream split anywhere")
struct WebSocketStreamObserverTests {
    /// A frame as a peer writes it: masked or not, any length encoding.
    static func frame(opcode: UInt8, fin: Bool = true, payload: [UInt8], mask: (UInt8, UInt8, UInt8, UInt8)?) -> [UInt8]
    {
        var bytes: [UInt8] = [(fin ? 0x80 : 0) | opcode]
        let maskBit: UInt8 = mask == nil ? 0 : 0x80
        switch payload.count {
        case ..<126: bytes.append(maskBit | UInt8(payload.count))
        case ..<65_536: bytes += [maskBit | 126, UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)]
        default: bytes += [maskBit | 127] + (0..<8).reversed().map { UInt8((payload.count >> ($0 * 8)) & 0xFF) }
        }
        guard let mask else { return bytes + payload }
        let key = [mask.0, mask.1, mask.2, mask.3]
        return bytes + key + payload.enumerated().map { $0.element ^ key[$0.offset % 4] }
    }

    /// What the reader reports, as comparable text.
    static func describe(_ event: WebSocketStreamObserver.Event) -> String {
        switch event {
        case .message(let payload, let isText): "message text=\(isText) \(Array(payload.readableBytesView))"
        case .ping(let payload): "ping \(Array(payload.readableBytesView))"
        case .pong(let payload): "pong \(Array(payload.readableBytesView))"
        case .close(let code, let reason): "close \(code.map(String.init) ?? "-") \(reason)"
        }
    }

    @Test(
        "the same events whatever the chunks; after each chunk, at most the start of one frame is held",
        arguments: [true, false]
    )
    func chunkBoundaries(readsBinaryMessages: Bool) throws {
        let sizes = [0, 1, 5, 125, 126, 127, 300, 16_384, 65_535, 65_536, 70_000]
        var stream: [UInt8] = []
        var largestFrame = 0
        var expected: [String] = []
        for (index, size) in sizes.enumerated() {
            let payload = (0..<size).map { UInt8(truncatingIfNeeded: $0 &* 31 &+ index) }
            let mask: (UInt8, UInt8, UInt8, UInt8)? = index.isMultiple(of: 2) ? (0x12, 0x34, 0x56, 0x78) : nil
            let frame = Self.frame(opcode: 0x2, payload: payload, mask: mask)
            largestFrame = max(largestFrame, frame.count)
            stream += frame
            if readsBinaryMessages { expected.append("message text=false \(payload)") }
            if index == 3 {
                stream += Self.frame(opcode: 0x9, payload: [1, 2, 3], mask: mask)
                expected.append("ping [1, 2, 3]")
            }
        }
        // A message in three fragments, a pong between them, then a close.
        stream += Self.frame(opcode: 0x1, fin: false, payload: Array("frag".utf8), mask: nil)
        stream += Self.frame(opcode: 0xA, payload: [], mask: (1, 2, 3, 4))
        stream += Self.frame(opcode: 0x0, fin: false, payload: Array("men".utf8), mask: nil)
        stream += Self.frame(opcode: 0x0, payload: Array("ted".utf8), mask: nil)
        expected += ["pong []", "message text=true \(Array("fragmented".utf8))"]
        // A binary one in two large fragments, a ping between them.
        let halves = [Array(repeating: UInt8(7), count: 20_000), Array(repeating: UInt8(8), count: 300)]
        stream += Self.frame(opcode: 0x2, fin: false, payload: halves[0], mask: (3, 3, 3, 3))
        stream += Self.frame(opcode: 0x9, payload: [9], mask: (3, 3, 3, 3))
        stream += Self.frame(opcode: 0x0, payload: halves[1], mask: (3, 3, 3, 3))
        expected.append("ping [9]")
        if readsBinaryMessages { expected.append("message text=false \(halves[0] + halves[1])") }
        stream += Self.frame(opcode: 0x8, payload: [0x03, 0xE8] + Array("bye".utf8), mask: (9, 9, 9, 9))
        expected.append("close 1000 bye")

        for round in 0..<16 {
            var observer = WebSocketStreamObserver(
                maximumMessageSize: 1 << 20,
                readsBinaryMessages: readsBinaryMessages
            )
            var events: [String] = []
            var offset = 0
            var mostHeld = 0
            var step = 0
            while offset < stream.count {
                // Tiny chunks, chunks of a few KiB and whole 64 KiB reads, mixed; a different mix each round.
                let limit = [3, 20, 4_096, 65_536][(round + step) % 4]
                let length = min((round &* 7_919 &+ step &* 104_729) % limit + 1, stream.count - offset)
                let chunk = ByteBuffer(bytes: stream[offset..<(offset + length)])
                try observer.observe(chunk) { events.append(Self.describe($0)) }
                mostHeld = max(mostHeld, observer.bufferedBytes)
                offset += length
                step += 1
            }
            #expect(events == expected, "round \(round)")
            #expect(observer.bufferedBytes == 0)
            // Skipped, a binary frame is never held: at most a header, or a small text or control frame.
            let budget = readsBinaryMessages ? largestFrame + 14 + 20_300 : 64
            #expect(mostHeld < budget, "round \(round): held \(mostHeld)")
        }
    }

    @Test(
        "frames after one that straddles two chunks are read in place, not from a copy of the chunk",
        arguments: [
            (1_000, 500),  // the payload split
            (4, 1),  // a 6-byte frame (an ACK's size) split inside its header: only its header is taken
            (0, 3),  // an empty masked frame split inside its mask
        ]
    )
    func framesReadInPlace(firstPayload: Int, split: Int) throws {
        let first = Self.frame(opcode: 0x2, payload: Array(repeating: 1, count: firstPayload), mask: (5, 6, 7, 8))
        let second = Self.frame(opcode: 0x2, payload: Array(repeating: 2, count: 1_000), mask: nil)
        let chunk = ByteBuffer(bytes: first[split...] + second)
        var observer = WebSocketStreamObserver(maximumMessageSize: 1 << 20)
        try observer.observe(ByteBuffer(bytes: first[..<split])) { _ in }
        var payloads: [ByteBuffer] = []
        try observer.observe(chunk) {
            if case .message(let payload, _) = $0 { payloads.append(payload) }
        }
        try #require(payloads.count == 2)
        #expect(payloads[0].readableBytesView.allSatisfy { $0 == 1 } && payloads[0].readableBytes == firstPayload)
        let chunkStart = chunk.withUnsafeReadableBytes { UInt(bitPattern: $0.baseAddress) }
        let chunkRange = chunkStart..<(chunkStart + UInt(chunk.readableBytes))
        let secondAddress = payloads[1].withUnsafeReadableBytes { UInt(bitPattern: $0.baseAddress) }
        #expect(chunkRange.contains(secondAddress), "the second frame's payload is a slice of the chunk it came in")
        #expect(payloads[1].readableBytesView.allSatisfy { $0 == 2 } && payloads[1].readableBytes == 1_000)
        #expect(observer.bufferedBytes == 0)
    }

    @Test("a frame over the budget fails as soon as its header has arrived, whole or in pieces")
    func overBudget() throws {
        // 2 000 bytes: a 4-byte header (the 16-bit length form), unmasked.
        let frame = Self.frame(opcode: 0x2, payload: Array(repeating: 7, count: 2_000), mask: nil)
        for split in [1, 2, 3, 4, 5, 100] {
            var observer = WebSocketStreamObserver(maximumMessageSize: 1_024)
            if split < 4 {
                try observer.observe(ByteBuffer(bytes: frame[..<split])) { _ in }
                #expect(throws: WebSocketStreamObserver.Failure.self, "split at \(split)") {
                    try observer.observe(ByteBuffer(bytes: frame[split..<(split + 1)])) { _ in }
                    try observer.observe(ByteBuffer(bytes: frame[(split + 1)..<4])) { _ in }
                }
            } else {
                #expect(throws: WebSocketStreamObserver.Failure.self, "split at \(split)") {
                    try observer.observe(ByteBuffer(bytes: frame[..<split])) { _ in }
                }
            }
        }
    }
}
