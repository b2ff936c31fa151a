import BLIPTestSupport
import NIOCore
import NIOEmbedded
import NIOWebSocket
import Testing

@testable import BLIPWebSocket

/// The server's frame decoder against NIO's on the same bytes: every frame the same (its payload unmasked),
/// whatever the masks, lengths and read boundaries, and the same refusals.
@Suite("The server's unmasking frame decoder")
struct UnmaskingFrameDecoderTests {
    /// What one decoder made of the input: each frame as (first byte's bits, mask key, unmasked payload), then
    /// the error that stopped it, if any.
    static func decode(
        _ chunks: [[UInt8]],
        unmasking: Bool,
        maximumFrameSize: Int = 1 << 20
    ) throws -> (frames: [String], error: String?) {
        let channel = EmbeddedChannel()
        if unmasking {
            try channel.pipeline.syncOperations.addHandler(
                ByteToMessageHandler(UnmaskingFrameDecoder(maximumFrameSize: maximumFrameSize))
            )
        } else {
            try channel.pipeline.syncOperations.addHandler(
                ByteToMessageHandler(WebSocketFrameDecoder(maxFrameSize: maximumFrameSize))
            )
        }
        var frames: [String] = []
        var failure: String?
        for chunk in chunks {
            do {
                try channel.writeInbound(ByteBuffer(bytes: chunk))
            } catch {
                failure = "\(error)"
                break
            }
            while let frame = try channel.readInbound(as: WebSocketFrame.self) {
                let payload = unmasking ? frame.data : frame.unmaskedData
                frames.append(
                    "fin=\(frame.fin) rsv=\(frame.rsv1)\(frame.rsv2)\(frame.rsv3) op=\(frame.opcode) "
                        + "key=\(frame.maskKey.map { "\(Array($0))" } ?? "-") \(Array(payload.readableBytesView))"
                )
            }
        }
        _ = try? channel.finish()
        return (frames, failure)
    }

    /// A frame's bytes: `opcode` (with FIN when `fin`), the payload masked with `key` when given.
    static func frame(opcode: UInt8, fin: Bool, payload: [UInt8], key: [UInt8]?) -> [UInt8] {
        var bytes: [UInt8] = [(fin ? 0x80 : 0) | opcode]
        let maskBit: UInt8 = key == nil ? 0 : 0x80
        if payload.count < 126 {
            bytes.append(maskBit | UInt8(payload.count))
        } else if payload.count <= 0xFFFF {
            bytes += [maskBit | 126, UInt8(payload.count >> 8), UInt8(payload.count & 0xFF)]
        } else {
            bytes.append(maskBit | 127)
            bytes += (0..<8).reversed().map { UInt8(truncatingIfNeeded: payload.count >> ($0 * 8)) }
        }
        if let key {
            bytes += key
            bytes += payload.enumerated().map { $0.element ^ key[$0.offset & 3] }
        } else {
            bytes += payload
        }
        return bytes
    }

    @Test("random frames split at random points: the same frames as NIO's decoder, unmasked", arguments: 0..<20)
    func sameFramesAsNIO(seed: UInt64) throws {
        var random = SeededRandom(seed: seed &* 0x9E37_79B9_7F4A_7C15 &+ 1)
        var stream: [UInt8] = []
        for _ in 0..<40 {
            let control = random.next() % 5 == 0
            let opcode: UInt8 =
                control ? [0x9, 0xA, 0x8][Int(random.next() % 3)] : [0x0, 0x1, 0x2][Int(random.next() % 3)]
            let length =
                control
                ? Int(random.next() % 126)
                : [0, 1, 7, 8, 9, 125, 126, 300, 65_535, 70_000][Int(random.next() % 10)]
            let payload = (0..<length).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            let key = random.next() % 4 == 0 ? nil : (0..<4).map { _ in UInt8(truncatingIfNeeded: random.next()) }
            stream += Self.frame(opcode: opcode, fin: control || random.next() % 2 == 0, payload: payload, key: key)
        }
        var chunks: [[UInt8]] = []
        var index = 0
        while index < stream.count {
            let size = [1, 2, 3, 7, 100, 4_096, 65_536][Int(random.next() % 7)]
            chunks.append(Array(stream[index..<min(stream.count, index + size)]))
            index += size
        }
        let ours = try Self.decode(chunks, unmasking: true)
        let nio = try Self.decode(chunks, unmasking: false)
        #expect(ours.frames.count == 40)
        #expect(ours.frames == nio.frames)
        #expect(ours.error == nil && nio.error == nil)
    }

    @Test("the same refusals: too long, a fragmented control frame, a long control frame, a 64-bit length's top bit")
    func sameRefusals() throws {
        let cases: [[UInt8]] = [
            Self.frame(opcode: 0x2, fin: true, payload: [UInt8](repeating: 1, count: 2_000), key: [1, 2, 3, 4]),
            Self.frame(opcode: 0x9, fin: false, payload: [1], key: [1, 2, 3, 4]),
            [0x89, 0xFE, 0x00, 0x7E, 1, 2, 3, 4],
            [0x82, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4],
        ]
        for bytes in cases {
            let ours = try Self.decode([bytes], unmasking: true, maximumFrameSize: 1_000)
            let nio = try Self.decode([bytes], unmasking: false, maximumFrameSize: 1_000)
            #expect(ours.error != nil && ours.error == nio.error, "\(bytes.prefix(4)): \(ours) against \(nio)")
            #expect(ours.frames.isEmpty)
        }
    }

    @Test(
        "the payload is unmasked into a buffer of its own; the read buffer, shared with NIO's pool, is left as it was"
    )
    func unmasksIntoItsOwnBuffer() throws {
        var decoder = UnmaskingFrameDecoder(maximumFrameSize: 1 << 20)
        let channel = EmbeddedChannel()
        let collector = FrameCollector()
        let entry = Entry()  // the decoder fires from here, so the collector after it gets the frame
        try channel.pipeline.syncOperations.addHandler(entry)
        try channel.pipeline.syncOperations.addHandler(collector)
        let context = try channel.pipeline.syncOperations.context(handler: entry)
        let bytes = Self.frame(opcode: 0x2, fin: true, payload: [UInt8](repeating: 9, count: 5_003), key: [1, 2, 3, 4])
        var buffer = ByteBuffer(bytes: bytes)
        let shared = buffer  // another holder of the same storage, as the receive pool is
        #expect(try decoder.decode(context: context, buffer: &buffer) == .continue)
        let frame = try #require(collector.frames.first)
        #expect(frame.data.readableBytes == 5_003 && frame.data.readableBytesView.allSatisfy { $0 == 9 })
        #expect(frame.maskKey != nil)
        #expect(Array(shared.readableBytesView) == bytes)  // nothing written into the shared read buffer
        #expect(buffer.readableBytes == 0)
        _ = try? channel.finish()
    }
}

/// Keeps the frames a decoder fires.
final class FrameCollector: ChannelInboundHandler, @unchecked Sendable {
    typealias InboundIn = WebSocketFrame
    var frames: [WebSocketFrame] = []

    func channelRead(context: ChannelHandlerContext, data: NIOAny) {
        self.frames.append(Self.unwrapInboundIn(data))
    }
}

/// A handler that passes everything on: the decoder's place in the pipeline.
final class Entry: ChannelInboundHandler, Sendable {
    typealias InboundIn = WebSocketFrame
}
