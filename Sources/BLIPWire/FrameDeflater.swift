internal import CBLIPZlib
internal import NIOCore

/// The BLIP 3 compressor of one direction: a single raw-deflate stream (window bits -15) shared by every
/// compressed frame, in send order, never reset. Each frame's data is sync-flushed so that the frame
/// ends on a byte boundary, and the flush's `00 00 FF FF` trailer is dropped (the receiver re-appends it).
final class FrameDeflater {
    static let syncFlushTrailer: [UInt8] = [0x00, 0x00, 0xFF, 0xFF]

    private let stream: ZlibStream

    init(level: Int32, memoryLevel: Int32, tunedForSpeed: Bool = false) throws(BLIPWireError) {
        self.stream = try ZlibStream(deflating: .rawDeflate, level: level, memoryLevel: memoryLevel)
        if tunedForSpeed {
            try self.stream.tune(goodLength: 8, maximumLazyMatch: 128, niceLength: 258, maximumChain: 48)
        }
    }

    /// The most bytes a sync-flushed deflate of `count` input bytes can produce (trailer included) when the
    /// stream starts on a byte boundary, as it always does after a sync flush. Stored blocks cost 5 bytes
    /// each and the flush adds an empty one; the slack covers a block boundary or two.
    static func outputBound(forInput count: Int) -> Int {
        count + (count >> 7) + 64
    }

    /// The most input whose sync-flushed output is sure to fit in `room` bytes.
    static func inputBound(forOutput room: Int) -> Int {
        // Inverse of outputBound, rounded down: count + count/128 + 64 <= room.
        max(0, (room - 64) * 128 / 129)
    }

    /// Deflates `input`, appending the output to `output`; with `flushing`, sync-flushes afterwards so
    /// that the output ends on a byte boundary with the `00 00 FF FF` trailer.
    func deflate(_ input: UnsafeRawBufferPointer, flushing: Bool, into output: inout ByteBuffer) throws(BLIPWireError) {
        try self.stream.process(
            input,
            flush: flushing ? Z_SYNC_FLUSH : Z_NO_FLUSH,
            into: &output,
            outputHint: Self.outputBound(forInput: input.count)
        )
    }

    /// Drops the 4-byte trailer of the last sync flush from the end of `output`.
    static func stripSyncFlushTrailer(from output: inout ByteBuffer) throws(BLIPWireError) {
        let start = output.writerIndex - 4
        guard start >= output.readerIndex, output.getInteger(at: start, as: UInt32.self) == 0x0000_FFFF else {
            throw BLIPWireError(.compressionUnavailable("deflate output does not end with a sync-flush marker"))
        }
        output.moveWriterIndex(to: start)
    }
}

/// The BLIP 3 decompressor of one direction: one raw-inflate stream for every compressed frame received,
/// never reset. Each frame body gets the `00 00 FF FF` trailer back before it is inflated.
final class FrameInflater {
    private let stream: ZlibStream
    private let trailer = ByteBuffer(bytes: FrameDeflater.syncFlushTrailer)

    init() throws(BLIPWireError) {
        self.stream = try ZlibStream(inflating: .rawDeflate)
    }

    /// Inflates one frame body (without its trailer) and appends the output to `output`.
    /// - Parameter limit: the most bytes one frame may inflate to (the decompression-bomb guard).
    func inflateFrame(
        _ body: UnsafeRawBufferPointer,
        limit: Int,
        into output: inout ByteBuffer
    ) throws(BLIPWireError) {
        let start = output.writerIndex
        let hint = min(limit, max(16_384, body.count * 4))
        var ended = try self.stream.process(
            body,
            flush: Z_SYNC_FLUSH,
            into: &output,
            outputLimit: limit,
            outputHint: hint,
            limitError: .inflatedTooLarge(limit: limit)
        )
        if !ended {
            let soFar = output.writerIndex - start
            ended = try self.trailer.withUnsafeReadableBytes { trailer throws(BLIPWireError) in
                try self.stream.process(
                    trailer,
                    flush: Z_SYNC_FLUSH,
                    into: &output,
                    outputLimit: limit - soFar,
                    outputHint: 4096,
                    limitError: .inflatedTooLarge(limit: limit)
                )
            }
        }
        // BLIP streams never end: a final block means the peer's deflater was finished or reset.
        if ended {
            throw BLIPWireError(.invalidCompressedData("deflate stream ended; BLIP 3 streams never end"))
        }
    }
}
