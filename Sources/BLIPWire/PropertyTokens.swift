/// The 14-entry abbreviation table of the seed and BLIP 2 dialects (digest 5.2): a property string equal
/// to an entry travels as its one-byte index, in keys and values alike. BLIP 3 has no tokens.
enum PropertyTokens {
    static let strings: [String] = [
        "Profile",  // 0x01
        "Error-Code",  // 0x02
        "Error-Domain",  // 0x03
        "Content-Type",  // 0x04
        "application/json",  // 0x05
        "application/octet-stream",  // 0x06
        "text/plain; charset=UTF-8",  // 0x07
        "text/xml",  // 0x08
        "Accept",  // 0x09
        "Cache-Control",  // 0x0A
        "must-revalidate",  // 0x0B
        "If-Match",  // 0x0C
        "If-None-Match",  // 0x0D
        "Location",  // 0x0E
    ]

    /// Bytes below this value form a one-byte token string on input.
    static let tokenLimit: UInt8 = 0x20

    /// The token for `string`, if the table holds it (exact, case-sensitive match).
    static func token(for string: String) -> UInt8? {
        // Every entry is 6 to 25 bytes long; skip the search for anything else.
        let length = string.utf8.count
        guard length >= 6 && length <= 25 else { return nil }
        guard let index = strings.firstIndex(of: string) else { return nil }
        return UInt8(index + 1)
    }

    /// The string for a token byte 0x01...0x0E.
    static func string(for token: UInt8) -> String? {
        guard token >= 1 && Int(token) <= strings.count else { return nil }
        return strings[Int(token) - 1]
    }
}
