/// Checks that bytes are well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates, nothing above
/// U+10FFFF), fed in pieces: a text message is checked fragment by fragment, so an invalid one is refused
/// as soon as the bad byte arrives (RFC 6455 8.1), not when the message ends.
struct UTF8Validator {
    /// Continuation bytes still expected for the code point in progress.
    private var remaining = 0
    /// Bounds for the next continuation byte (narrower than 0x80...0xBF right after E0, ED, F0 and F4).
    private var lower: UInt8 = 0x80
    private var upper: UInt8 = 0xBF

    /// True when no code point is left unfinished.
    var isComplete: Bool { self.remaining == 0 }

    /// Feeds the next bytes; false once the input can no longer be UTF-8 (the validator is then spent).
    mutating func feed(_ bytes: UnsafeRawBufferPointer) -> Bool {
        guard let base = bytes.baseAddress else { return true }
        let count = bytes.count
        var index = 0
        while index < count {
            if self.remaining == 0 {
                // ASCII runs, eight bytes at a time.
                while index + 8 <= count,
                    base.loadUnaligned(fromByteOffset: index, as: UInt64.self) & 0x8080_8080_8080_8080 == 0
                {
                    index += 8
                }
                guard index < count else { break }
            }
            let byte = base.load(fromByteOffset: index, as: UInt8.self)
            index += 1
            if self.remaining > 0 {
                guard byte >= self.lower && byte <= self.upper else { return false }
                self.lower = 0x80
                self.upper = 0xBF
                self.remaining -= 1
                continue
            }
            switch byte {
            case 0x00...0x7F:
                break
            case 0xC2...0xDF:
                self.remaining = 1
            case 0xE0:
                self.remaining = 2
                self.lower = 0xA0  // no overlong three-byte forms
            case 0xED:
                self.remaining = 2
                self.upper = 0x9F  // no surrogates (U+D800...U+DFFF)
            case 0xE1...0xEC, 0xEE...0xEF:
                self.remaining = 2
            case 0xF0:
                self.remaining = 3
                self.lower = 0x90  // no overlong four-byte forms
            case 0xF1...0xF3:
                self.remaining = 3
            case 0xF4:
                self.remaining = 3
                self.upper = 0x8F  // nothing above U+10FFFF
            default:
                return false  // continuation bytes out of place, C0, C1, F5...FF
            }
        }
        return true
    }

    /// Checks bytes that form a whole text (a message or a close reason).
    static func isValid(_ bytes: UnsafeRawBufferPointer) -> Bool {
        var validator = UTF8Validator()
        return validator.feed(bytes) && validator.isComplete
    }
}
