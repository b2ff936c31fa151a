/// One challenge of a `WWW-Authenticate` header (RFC 7235 section 4.1): the scheme the server accepts and its
/// parameters, so that a client can tell Basic from Bearer and find the realm without parsing HTTP.
public struct BLIPAuthenticationChallenge: Sendable, Hashable, CustomStringConvertible {
    /// As sent (schemes compare without regard to case: see ``hasScheme(_:)``).
    public var scheme: String
    /// The auth-params, names lowercased (they compare without regard to case), quoted values unescaped.
    public var parameters: [String: String]
    /// The token68 form (`Negotiate YIIB...`) instead of parameters, if that is what the server sent.
    public var token68: String?

    public init(scheme: String, parameters: [String: String] = [:], token68: String? = nil) {
        self.scheme = scheme
        self.parameters = parameters
        self.token68 = token68
    }

    /// The protection space (`realm` parameter), if given.
    public var realm: String? { self.parameters["realm"] }

    public func hasScheme(_ scheme: String) -> Bool {
        self.scheme.lowercased() == scheme.lowercased()
    }

    public var description: String {
        let parameters = self.parameters.sorted { $0.key < $1.key }.map { "\($0.key)=\"\($0.value)\"" }
        return ([self.scheme] + (self.token68.map { [$0] } ?? parameters)).joined(separator: " ")
    }

    /// Every challenge in the values of `WWW-Authenticate` header fields, in order. A header may hold several
    /// challenges separated by commas, which also separate one challenge's parameters; what cannot be
    /// parsed is skipped up to the next comma.
    public static func parse(_ headerValues: [String]) -> [BLIPAuthenticationChallenge] {
        headerValues.flatMap { value in
            var parser = ChallengeParser(Array(value.utf8))
            return parser.challenges()
        }
    }
}

/// The grammar of RFC 7235 section 2.1 over one header value:
/// `challenge = auth-scheme [ 1*SP ( token68 / #auth-param ) ]`,
/// `auth-param = token BWS "=" BWS ( token / quoted-string )`.
private struct ChallengeParser {
    let bytes: [UInt8]
    var index = 0

    init(_ bytes: [UInt8]) {
        self.bytes = bytes
    }

    mutating func challenges() -> [BLIPAuthenticationChallenge] {
        var result: [BLIPAuthenticationChallenge] = []
        while self.index < self.bytes.count {
            self.skip { $0 == UInt8(ascii: ",") || Self.isSpace($0) }
            guard let scheme = self.token() else {
                self.skip { $0 != UInt8(ascii: ",") }  // garbage: resynchronise at the next comma
                continue
            }
            var challenge = BLIPAuthenticationChallenge(scheme: scheme)
            self.skip(while: Self.isSpace)
            if let token68 = self.token68() {
                challenge.token68 = token68
            } else {
                challenge.parameters = self.parameters()
            }
            result.append(challenge)
        }
        return result
    }

    /// A token68 only if nothing but the end or a comma follows it (otherwise it is the start of a parameter).
    private mutating func token68() -> String? {
        let start = self.index
        self.skip(while: Self.isToken68)
        guard self.index > start else { return nil }
        self.skip { $0 == UInt8(ascii: "=") }
        let end = self.index
        self.skip(while: Self.isSpace)
        if self.index == self.bytes.count || self.bytes[self.index] == UInt8(ascii: ",") {
            return String(decoding: self.bytes[start..<end], as: UTF8.self)
        }
        self.index = start
        return nil
    }

    /// Parameters up to the end, or up to a comma followed by something that is not a parameter (the next
    /// challenge's scheme), which is left for the caller.
    private mutating func parameters() -> [String: String] {
        var parameters: [String: String] = [:]
        while self.index < self.bytes.count {
            let start = self.index
            self.skip { $0 == UInt8(ascii: ",") || Self.isSpace($0) }
            guard let name = self.token() else {
                self.index = start
                break
            }
            self.skip(while: Self.isSpace)
            guard self.index < self.bytes.count, self.bytes[self.index] == UInt8(ascii: "=") else {
                self.index = start  // a scheme: the next challenge begins
                break
            }
            self.index += 1
            self.skip(while: Self.isSpace)
            guard let value = self.quotedString() ?? self.token() else {
                self.skip { $0 != UInt8(ascii: ",") }
                continue
            }
            parameters[name.lowercased()] = value
            self.skip(while: Self.isSpace)
            if self.index < self.bytes.count, self.bytes[self.index] != UInt8(ascii: ",") {
                self.skip { $0 != UInt8(ascii: ",") }  // garbage after a value
            }
        }
        return parameters
    }

    private mutating func token() -> String? {
        let start = self.index
        self.skip(while: HTTPToken.isTokenCharacter)
        return self.index > start ? String(decoding: self.bytes[start..<self.index], as: UTF8.self) : nil
    }

    /// `"..."` with backslash escapes; an unterminated string runs to the end.
    private mutating func quotedString() -> String? {
        guard self.index < self.bytes.count, self.bytes[self.index] == UInt8(ascii: "\"") else { return nil }
        self.index += 1
        var value: [UInt8] = []
        while self.index < self.bytes.count {
            let byte = self.bytes[self.index]
            self.index += 1
            if byte == UInt8(ascii: "\"") { break }
            if byte == UInt8(ascii: "\\"), self.index < self.bytes.count {
                value.append(self.bytes[self.index])
                self.index += 1
            } else {
                value.append(byte)
            }
        }
        return String(decoding: value, as: UTF8.self)
    }

    private mutating func skip(while predicate: (UInt8) -> Bool) {
        while self.index < self.bytes.count, predicate(self.bytes[self.index]) { self.index += 1 }
    }

    private static func isSpace(_ byte: UInt8) -> Bool {
        byte == UInt8(ascii: " ") || byte == UInt8(ascii: "\t")
    }

    private static func isToken68(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "0")...UInt8(ascii: "9"):
            return true
        default:
            return Array("-._~+/".utf8).contains(byte)
        }
    }
}
