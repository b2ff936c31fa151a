/// What a request target names among a server's static files, decided from the target alone: the file
/// system is asked afterwards (``StaticFileResponder``), so that every refusal here holds whatever is on
/// disk.
enum StaticPath: Equatable {
    /// A file under the static directory, as path segments (decoded, none empty, none starting with `.`).
    case file([String])
    /// The built-in browser client module or its declarations.
    case browserClient(module: Bool)
    /// A request that names nothing servable: 400 when it is malformed, 404 otherwise.
    case refused(badRequest: Bool)

    init(target: String) {
        // The query and fragment name nothing.
        let path = target.prefix { $0 != "?" && $0 != "#" }
        guard path.first == "/" else {
            self = .refused(badRequest: true)
            return
        }
        if path == BLIPBrowserClient.modulePath {
            self = .browserClient(module: true)
            return
        }
        if path == BLIPBrowserClient.typeDeclarationsPath {
            self = .browserClient(module: false)
            return
        }
        // Split before decoding, so that an encoded slash cannot make a segment of its own.
        var segments = path.dropFirst().split(separator: "/", omittingEmptySubsequences: false).map(String.init)
        if segments.last == "" { segments[segments.count - 1] = "index.html" }
        var decoded: [String] = []
        for segment in segments {
            guard let name = Self.percentDecoded(segment) else {
                self = .refused(badRequest: true)
                return
            }
            if name.contains(where: { $0 == "/" || $0 == "\\" || $0 == "\0" }) {
                self = .refused(badRequest: true)
                return
            }
            // Empty (`a//b`), `.`, `..` and hidden names are not served.
            if name.isEmpty || name.hasPrefix(".") {
                self = .refused(badRequest: false)
                return
            }
            decoded.append(name)
        }
        self = .file(decoded)
    }

    /// A path segment with its `%XX` escapes decoded; nil for a bad escape or bytes that are not UTF-8.
    static func percentDecoded(_ segment: String) -> String? {
        var bytes: [UInt8] = []
        var utf8 = segment.utf8.makeIterator()
        while let byte = utf8.next() {
            guard byte == UInt8(ascii: "%") else {
                bytes.append(byte)
                continue
            }
            guard let high = utf8.next().flatMap(Self.hexValue), let low = utf8.next().flatMap(Self.hexValue) else {
                return nil
            }
            bytes.append(high << 4 | low)
        }
        return String(validating: bytes, as: UTF8.self)
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): byte - UInt8(ascii: "A") + 10
        default: nil
        }
    }
}
