internal import CBLIPZlib
internal import NIOCore

/// One zlib stream at a stable heap address (zlib keeps a back-pointer to it and refuses a stream that
/// has moved), ended and freed with its owner.
final class ZlibStream {
    enum Kind {
        case deflate
        case inflate
    }

    /// The window bits that select the container: raw deflate for BLIP 3 frames, gzip for seed and
    /// BLIP 2 bodies, and "gzip or zlib, whichever the header says" for receiving those bodies.
    enum Format {
        case rawDeflate
        case gzip
        case gzipOrZlib

        var windowBits: Int32 {
            switch self {
            case .rawDeflate: -15
            case .gzip: 15 + 16
            case .gzipOrZlib: 15 + 32
            }
        }
    }

    let kind: Kind
    let pointer: UnsafeMutablePointer<z_stream>

    init(deflating format: Format, level: Int32, memoryLevel: Int32) throws(BLIPWireError) {
        self.kind = .deflate
        self.pointer = .allocate(capacity: 1)
        self.pointer.initialize(to: z_stream())
        let status = CBLIPZlib_deflateInit2(self.pointer, level, format.windowBits, memoryLevel)
        guard status == Z_OK else {
            self.pointer.deallocate()
            throw BLIPWireError(.compressionUnavailable("deflateInit2 returned \(status)"))
        }
    }

    /// Sets the deflater's match parameters (zlib's `deflateTune`), before any data.
    func tune(goodLength: Int32, maximumLazyMatch: Int32, niceLength: Int32, maximumChain: Int32) throws(BLIPWireError)
    {
        let status = deflateTune(self.pointer, goodLength, maximumLazyMatch, niceLength, maximumChain)
        guard status == Z_OK else { throw BLIPWireError(.compressionUnavailable("deflateTune returned \(status)")) }
    }

    init(inflating format: Format) throws(BLIPWireError) {
        self.kind = .inflate
        self.pointer = .allocate(capacity: 1)
        self.pointer.initialize(to: z_stream())
        let status = CBLIPZlib_inflateInit2(self.pointer, format.windowBits)
        guard status == Z_OK else {
            self.pointer.deallocate()
            throw BLIPWireError(.compressionUnavailable("inflateInit2 returned \(status)"))
        }
    }

    deinit {
        switch self.kind {
        case .deflate: deflateEnd(self.pointer)
        case .inflate: inflateEnd(self.pointer)
        }
        self.pointer.deallocate()
    }

    /// Starts the stream over (for the per-message gzip of the older dialects); allocates nothing.
    func reset() {
        switch self.kind {
        case .deflate: deflateReset(self.pointer)
        case .inflate: inflateReset(self.pointer)
        }
    }

    /// zlib's message for the last error, or the status code.
    func errorMessage(_ status: Int32) -> String {
        if let message = self.pointer.pointee.msg { return String(cString: message) }
        return "zlib status \(status)"
    }

    /// Runs `deflate` or `inflate` over all of `input`, appending output to `output` and growing it as
    /// needed; stops when the input is consumed and zlib has nothing more to give.
    ///
    /// - Parameters:
    ///   - flush: the zlib flush mode for this call.
    ///   - outputLimit: total bytes `output` may grow by; exceeding it throws `limitError`.
    ///   - outputHint: writable bytes to ask for first (the caller's estimate of the output size).
    /// - Returns: whether zlib reported the end of the stream.
    @discardableResult
    func process(
        _ input: UnsafeRawBufferPointer,
        flush: Int32,
        into output: inout ByteBuffer,
        outputLimit: Int = .max,
        outputHint: Int,
        limitError: BLIPWireError.Code? = nil
    ) throws(BLIPWireError) -> Bool {
        let stream = self.pointer
        stream.pointee.next_in =
            input.isEmpty
            ? nil : UnsafeMutablePointer(mutating: input.baseAddress!.assumingMemoryBound(to: Bytef.self))
        stream.pointee.avail_in = uInt(input.count)
        defer {
            stream.pointee.next_in = nil
            stream.pointee.avail_in = 0
        }

        var produced = 0
        var request = max(64, min(outputHint, outputLimit == .max ? outputHint : outputLimit + 1))
        while true {
            var status: Int32 = Z_OK
            var availableOut = 0
            let written = output.writeWithUnsafeMutableBytes(minimumWritableBytes: request) { target in
                // Never more room than the limit leaves (plus one byte, to see it crossed): the buffer may
                // have grown well past what was asked for.
                let allowed = outputLimit == .max ? Int(UInt32.max) : outputLimit - produced + 1
                let room = min(target.count, Int(UInt32.max), allowed)
                stream.pointee.next_out = target.baseAddress!.assumingMemoryBound(to: Bytef.self)
                stream.pointee.avail_out = uInt(room)
                status = self.kind == .deflate ? deflate(stream, flush) : inflate(stream, flush)
                availableOut = Int(stream.pointee.avail_out)
                stream.pointee.next_out = nil
                stream.pointee.avail_out = 0
                return room - availableOut
            }
            produced += written
            if produced > outputLimit, let limitError {
                throw BLIPWireError(limitError)
            }
            switch status {
            case Z_STREAM_END:
                return true
            case Z_OK, Z_BUF_ERROR:
                // Finished once the input is used up and zlib left output room unused (it had nothing more
                // to give). Room left over with input unread means zlib cannot go on.
                if availableOut > 0 {
                    if stream.pointee.avail_in == 0 { return false }
                    throw BLIPWireError(.invalidCompressedData("zlib stopped with input left (status \(status))"))
                }
            case Z_NEED_DICT:
                throw BLIPWireError(.invalidCompressedData("stream needs a preset dictionary"))
            case Z_DATA_ERROR:
                throw BLIPWireError(.invalidCompressedData(self.errorMessage(status)))
            default:
                throw BLIPWireError(.compressionUnavailable(self.errorMessage(status)))
            }
            request = min(max(request * 2, 4096), 1 << 20)
            if outputLimit != .max {
                request = min(request, outputLimit - produced + 1)
            }
        }
    }
}
