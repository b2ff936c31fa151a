import NIOCore
import Testing

@testable import BLIPWire

/// The encoder reuses the emptied buffer of a small message already framed for the next message's data.
/// Only data copied into a buffer of the encoder's needs one: the bodies here are cut from a larger buffer
/// (as a read buffer's are), which the encoder does not keep (see `DeferredMessageDataTests`).
@Suite("Message buffer reuse")
struct MessageBufferReuseTests {
    /// `bytes` as a slice of a buffer too large for the encoder to keep until the message is framed.
    static func cutFromLargeBuffer(_ bytes: [UInt8]) -> ByteBuffer {
        var large = ByteBuffer(repeating: 0xEE, count: BLIPFrameEncoder.deferredBodyStorageLimit + 1)
        large.writeBytes(bytes)
        return large.getSlice(at: BLIPFrameEncoder.deferredBodyStorageLimit + 1, length: bytes.count)!
    }

    @Test(
        "a reused buffer gives the same frames as a new one, for messages of every small size",
        arguments: [BLIPDialect.blip3, .blip2, .seed]
    )
    func reusedBufferFramesExactly(dialect: BLIPDialect) throws {
        let reusing = BLIPFrameEncoder(dialect: dialect)
        let fresh = BLIPFrameEncoder(dialect: dialect)
        var reused = 0
        // Sizes that grow and shrink, so a reused buffer is sometimes too small and often holds older,
        // longer data past its new end.
        for index in 0..<60 {
            let size = (index * 577) % 1900
            let body = Self.cutFromLargeBuffer((0..<size).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ index) })
            let properties: BLIPProperties = ["Profile": "rev", "X-Index": "\(index)"]
            reused += reusing.spareBufferCount
            var data = try reusing.makeMessageData(properties: properties, body: body, compressed: false).data
            var expectedData = try fresh.makeMessageData(properties: properties, body: body, compressed: false).data
            let frames = try reusing.allFrames(of: &data, number: UInt64(index + 1), frameSize: 1024)
            let expected = try fresh.allFrames(of: &expectedData, number: UInt64(index + 1), frameSize: 1024)
            #expect(frames == expected, "message \(index), \(size) bytes")
            reusing.recycle(&data)
        }
        // Every message after the first found a spare buffer.
        #expect(reused == 59)
    }

    @Test("a buffer something else still holds is not reused")
    func sharedBufferIsNotReused() throws {
        let encoder = BLIPFrameEncoder(dialect: .blip3)
        var data = try encoder.makeMessageData(
            properties: ["Profile": "x"],
            body: Self.cutFromLargeBuffer(Array("hi".utf8)),
            compressed: false
        )
        .data
        let held = data.readSlice(upTo: data.readableBytes)
        encoder.recycle(&data)
        #expect(encoder.spareBufferCount == 0)
        #expect(held.readableBytes > 0)

        // The caller's buffer, framed in place, is never taken either.
        var callers = BLIPMessageData(ByteBuffer(string: "caller's bytes"))
        _ = callers.readSlice(upTo: callers.readableBytes)
        encoder.recycle(&callers)
        #expect(encoder.spareBufferCount == 0)
    }

    @Test("a caller's buffer that followed the encoder's is never taken, even once nothing else holds it")
    func appendedCallerBufferIsNotTaken() {
        var head = ByteBuffer()
        head.writeString("properties")
        var data = BLIPMessageData(ownedBuffer: head)
        data.append(ByteBuffer(string: "a caller's body"))  // framed in place, after the head
        while data.readableBytes > 0 { _ = data.readSlice(upTo: 4) }
        #expect(data.takeDrainedBuffer() == nil)
    }

    @Test("an encoder keeps a few small spare buffers, never a large one")
    func sparesAreBounded() throws {
        let encoder = BLIPFrameEncoder(dialect: .blip3)
        var datas = try (0..<10).map { index in
            try encoder.makeMessageData(
                properties: ["X-Index": "\(index)"],
                body: Self.cutFromLargeBuffer(Array("body".utf8)),
                compressed: false
            )
            .data
        }
        for index in datas.indices {
            _ = try encoder.allFrames(of: &datas[index], number: UInt64(index + 1), frameSize: 1024)
            encoder.recycle(&datas[index])
        }
        #expect(encoder.spareBufferCount == BLIPFrameEncoder.maximumSpareBuffers)

        let emptied = BLIPFrameEncoder(dialect: .blip3)
        let large = ByteBuffer(repeating: 1, count: BLIPFrameEncoder.maximumSpareCapacity + 1)
        var data = try emptied.makeMessageData(properties: [:], body: large, compressed: false).data
        _ = try emptied.allFrames(of: &data, number: 1, frameSize: 1024)
        emptied.recycle(&data)
        #expect(emptied.spareBufferCount == 0)
    }
}
