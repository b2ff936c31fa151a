/// A malformed or unencodable piece of BLIP wire data.
///
/// Every decode failure says what was wrong (``reason``) and where: the byte ``offset`` within the unit
/// that was being decoded (a frame, a property block or a message's data stream) and, when a
/// ``BLIPFrameDecoder`` found it, the index of the frame within its direction.
@usableFromInline package struct BLIPWireError: Error, Hashable, Sendable, CustomStringConvertible {
    @usableFromInline package enum Code: Hashable, Sendable {
        /// The input ended inside a varint.
        case truncatedVarint
        /// A varint is longer than 10 bytes or its 10th byte is above 1: it does not fit 64 bits.
        case varintOverflow
        /// A request number above 2^32-1 was to be written; go-blip and Cocoa peers truncate them.
        case messageNumberTooLarge(UInt64)
        /// The flags varint is above 0xFF, which the seed and BLIP 2 dialects reject.
        case flagsOutOfRange(UInt64)
        /// A flag that this dialect cannot express was to be written (meta in BLIP 3).
        case flagNotInDialect(String)
        /// The frame is shorter than its header plus the mandatory trailer.
        case frameTooShort(length: Int, minimum: Int)
        /// The running CRC-32 of the direction does not match the frame's trailer.
        case checksumMismatch(expected: UInt32, computed: UInt32)
        /// zlib rejected the deflate data of a frame.
        case invalidCompressedData(String)
        /// Compressed data inflated to more than the configured limit (a decompression bomb).
        case inflatedTooLarge(limit: Int)
        /// A message body is longer than the configured limit.
        case bodyTooLarge(limit: Int)
        /// A gzip (or zlib) body of the seed or BLIP 2 dialect is corrupt or incomplete.
        case invalidGzipBody(String)
        /// The property block is longer than the configured limit.
        case propertiesTooLarge(length: UInt64, limit: Int)
        /// The property block's declared length runs past the end of the data.
        case propertiesLengthExceedsData(declared: UInt64, available: Int)
        /// A non-empty property block does not end with a NUL byte.
        case propertiesNotTerminated
        /// The property block holds an odd number of strings (a key without a value).
        case oddNumberOfPropertyStrings(Int)
        /// The same property name occurs twice.
        case duplicatePropertyName(String)
        /// A property string is not valid UTF-8.
        case invalidUTF8
        /// A one-byte control string in a tokenized dialect that is not in the token table (0x0F-0x1F).
        case unknownPropertyToken(UInt8)
        /// An empty key or value in the seed dialect, whose original parser rejects them.
        case emptyPropertyString
        /// A property string to be written contains a NUL byte, which would split it on the wire.
        case propertyStringContainsNUL(String)
        /// A property string to be written is a single control byte, which a tokenizing peer would
        /// misread as a token.
        case propertyStringLooksLikeToken(String)
        /// The message ended before its property block was complete.
        case messageEndsInsideProperties
        /// zlib could not allocate or initialise a stream.
        case compressionUnavailable(String)
    }

    package var code: Code
    /// Byte offset of the problem within the unit being decoded, when known.
    package var offset: Int?
    /// Index (from 0) of the frame within its direction, when a frame decoder found the problem.
    package var frameIndex: Int?

    @usableFromInline package init(_ reason: Code, offset: Int? = nil, frameIndex: Int? = nil) {
        self.code = reason
        self.offset = offset
        self.frameIndex = frameIndex
    }

    @usableFromInline package var description: String {
        var text = "BLIP wire error: \(self.code.summary)"
        if let offset { text += " at byte \(offset)" }
        if let frameIndex { text += " of frame \(frameIndex)" }
        return text
    }

    /// The same error, located at `offset` within an enclosing unit that starts `base` bytes in.
    func shifted(by base: Int) -> BLIPWireError {
        var copy = self
        copy.offset = (self.offset ?? 0) + base
        return copy
    }
}

extension BLIPWireError.Code {
    var summary: String {
        switch self {
        case .truncatedVarint: "input ends inside a varint"
        case .varintOverflow: "varint does not fit 64 bits"
        case .messageNumberTooLarge(let n): "message number \(n) is above 2^32-1"
        case .flagsOutOfRange(let f): "flags value \(f) is above 0xFF"
        case .flagNotInDialect(let name): "flag \(name) does not exist in this dialect"
        case .frameTooShort(let length, let minimum): "frame of \(length) bytes is shorter than \(minimum)"
        case .checksumMismatch(let expected, let computed):
            "CRC-32 mismatch: frame says \(hex(expected)), data gives \(hex(computed))"
        case .invalidCompressedData(let message): "invalid deflate data (\(message))"
        case .inflatedTooLarge(let limit): "compressed data inflates to more than \(limit) bytes"
        case .bodyTooLarge(let limit): "message body exceeds \(limit) bytes"
        case .invalidGzipBody(let message): "invalid gzip body (\(message))"
        case .propertiesTooLarge(let length, let limit): "property block of \(length) bytes exceeds \(limit)"
        case .propertiesLengthExceedsData(let declared, let available):
            "property block declares \(declared) bytes but only \(available) follow"
        case .propertiesNotTerminated: "property block is not NUL-terminated"
        case .oddNumberOfPropertyStrings(let count): "property block holds an odd number (\(count)) of strings"
        case .duplicatePropertyName(let name): "duplicate property name \"\(name)\""
        case .invalidUTF8: "property string is not valid UTF-8"
        case .unknownPropertyToken(let byte): "unknown property token \(hex(UInt32(byte)))"
        case .emptyPropertyString: "empty property string (not allowed in the seed dialect)"
        case .propertyStringContainsNUL(let string): "property string \"\(string)\" contains NUL"
        case .propertyStringLooksLikeToken(let string): "property string \(Array(string.utf8)) would read as a token"
        case .messageEndsInsideProperties: "message ends inside its property block"
        case .compressionUnavailable(let message): "zlib stream unavailable (\(message))"
        }
    }
}

private func hex(_ value: UInt32) -> String {
    "0x" + String(value, radix: 16, uppercase: true)
}
