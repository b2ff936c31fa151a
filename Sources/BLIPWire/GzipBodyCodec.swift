internal import CBLIPZlib
internal import NIOCore

/// The seed and BLIP 2 body compressor: a whole gzip stream per message body. The stream is reused with
/// `deflateReset` rather than created per message.
final class GzipBodyCompressor {
    private let stream: ZlibStream

    init(level: Int32) throws(BLIPWireError) {
        // memLevel 8 is zlib's default, which is what both Cocoa's and Go's gzip writers use.
        self.stream = try ZlibStream(deflating: .gzip, level: level, memoryLevel: 8)
    }

    /// Appends the gzip of `body` to `output`.
    func compress(_ body: UnsafeRawBufferPointer, into output: inout ByteBuffer) throws(BLIPWireError) {
        self.stream.reset()
        try self.stream.process(body, flush: Z_FINISH, into: &output, outputHint: body.count + body.count / 64 + 32)
    }
}

/// The seed and BLIP 2 body decompressor: accepts a gzip or zlib stream (like GTM's inflater), fed in
/// pieces as frames arrive. Reused across messages with ``reset()``.
final class GzipBodyDecompressor {
    private let stream: ZlibStream
    private(set) var isFinished = false
    /// Output buffer reused from message to message; clearing it allocates nothing once the caller has
    /// let go of the previous piece.
    var scratch = ByteBuffer()

    init() throws(BLIPWireError) {
        self.stream = try ZlibStream(inflating: .gzipOrZlib)
    }

    func reset() {
        self.stream.reset()
        self.isFinished = false
    }

    /// Inflates the next piece of the body, appending to `output`; at most `limit` bytes of output.
    func decompress(
        _ piece: UnsafeRawBufferPointer,
        limit: Int,
        into output: inout ByteBuffer
    ) throws(BLIPWireError) {
        guard !piece.isEmpty else { return }
        guard !self.isFinished else { return }  // bytes after the gzip trailer are ignored, as GTM does
        do throws(BLIPWireError) {
            self.isFinished = try self.stream.process(
                piece,
                flush: Z_SYNC_FLUSH,
                into: &output,
                outputLimit: limit,
                outputHint: min(limit, max(4096, piece.count * 4)),
                limitError: .inflatedTooLarge(limit: limit)
            )
        } catch let error where error.code != .inflatedTooLarge(limit: limit) {
            throw BLIPWireError(.invalidGzipBody("\(error.code.summary)"))
        }
    }
}
