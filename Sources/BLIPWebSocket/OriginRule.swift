/// Which browser pages may open a WebSocket to a BLIP endpoint, judged by the upgrade's `Origin` header:
/// the defence against cross-site WebSocket hijacking, where a page on any site opens an authenticated
/// connection with the browser's cookies or cached Basic credentials.
///
/// - No `Origin`: not a browser (an app, Couchbase Lite, go-blip, this package's client). Allowed.
/// - An `http` or `https` origin whose host and port are the `Host` the request named: the server's own
///   pages. Allowed. The scheme is not compared, as go-blip does not: behind a proxy that terminates TLS
///   the page is `https` while the server sees a plain request.
/// - An origin that matches one of the allowed patterns. Allowed.
/// - Anything else (another host or port, `null` from a sandboxed frame or a file, another scheme): refused
///   with 403.
///
/// Patterns, compared without regard to case, with trailing dots ignored: `*` allows every origin (chosen
/// explicitly, never by default); a pattern with `://` is matched against the whole origin
/// (`https://app.example.com`, `https://*.example.com`); any other against its host and port when the
/// pattern names a port (`app.example.com:8443`) and its host alone otherwise (`*.example.com`, which does
/// not match `example.com` itself). `*` matches any run of characters. Hosts are compared as the browser
/// sends them: internationalized names in their ASCII (punycode) form.
package struct OriginRule: Sendable, Hashable {
    let patterns: [String]
    let allowsAll: Bool

    package init(allowedOrigins: [String]) {
        let normalized = allowedOrigins.map { Self.normalized($0) }
        self.allowsAll = normalized.contains("*")
        self.patterns = normalized.filter { $0 != "*" }
    }

    /// Whether an upgrade with this `Origin` (nil: none sent) and `Host` may go on.
    package func allows(origin: String?, host: String?) -> Bool {
        guard let origin else { return true }
        return self.allowsAll || self.isAllowListed(origin) || Self.isSameOrigin(origin, host: host)
    }

    /// Whether `origin` matches one of the patterns.
    package func isAllowListed(_ origin: String) -> Bool {
        if self.allowsAll { return true }
        guard let parsed = ParsedOrigin(origin) else { return false }
        for pattern in self.patterns {
            if pattern.contains("://") {
                if Self.glob(pattern, matches: parsed.serialized) { return true }
            } else if pattern.contains(":") {
                if Self.glob(pattern, matches: parsed.authority) { return true }
            } else if Self.glob(pattern, matches: parsed.host) {
                return true
            }
        }
        return false
    }

    /// Whether `origin` is an `http` or `https` origin for the host and port `host` (a `Host` header) names.
    package static func isSameOrigin(_ origin: String, host: String?) -> Bool {
        guard let parsed = ParsedOrigin(origin), parsed.scheme == "http" || parsed.scheme == "https",
            let host, let requested = ParsedOrigin.authority(host, scheme: parsed.scheme)
        else { return false }
        return parsed.authority == requested
    }

    static func normalized(_ text: String) -> String {
        var text = text.lowercased()
        while text.hasSuffix(".") { text.removeLast() }
        return text
    }

    /// `*` matches any run of characters (none included); everything else matches itself.
    static func glob(_ pattern: String, matches text: String) -> Bool {
        let pattern = Array(pattern.utf8)
        let text = Array(text.utf8)
        var p = 0
        var t = 0
        var star: Int?
        var resume = 0
        while t < text.count {
            if p < pattern.count && pattern[p] == UInt8(ascii: "*") {
                star = p
                resume = t
                p += 1
            } else if p < pattern.count && pattern[p] == text[t] {
                p += 1
                t += 1
            } else if let star {
                p = star + 1
                resume += 1
                t = resume
            } else {
                return false
            }
        }
        while p < pattern.count && pattern[p] == UInt8(ascii: "*") { p += 1 }
        return p == pattern.count
    }
}

/// An `Origin` header's value, `scheme://host[:port]`, lowercased, with a trailing dot of the host and a
/// port that is the scheme's default left out (browsers leave those out too).
struct ParsedOrigin: Hashable {
    var scheme: String
    var host: String
    /// `host`, or `host:port` when the port is not the scheme's default.
    var authority: String

    var serialized: String { "\(self.scheme)://\(self.authority)" }

    init?(_ origin: String) {
        let text = origin.lowercased()
        guard let separator = text.firstRange(of: "://") else { return nil }
        let scheme = String(text[..<separator.lowerBound])
        let rest = text[separator.upperBound...]
        guard !scheme.isEmpty, !rest.isEmpty, !rest.contains("/"), !rest.contains("@"),
            let authority = Self.authority(String(rest), scheme: scheme)
        else { return nil }
        self.scheme = scheme
        self.authority = authority
        self.host = Self.hostPart(of: authority)
    }

    /// `host[:port]` (a `Host` header or an origin's authority) normalized for `scheme`; nil if malformed.
    static func authority(_ text: String, scheme: String) -> String? {
        let text = text.lowercased()
        var host: Substring
        var port: Substring?
        if text.hasPrefix("[") {
            guard let end = text.firstIndex(of: "]") else { return nil }
            host = text[...end]
            let after = text[text.index(after: end)...]
            if !after.isEmpty {
                guard after.hasPrefix(":") else { return nil }
                port = after.dropFirst()
            }
        } else {
            let parts = text.split(separator: ":", omittingEmptySubsequences: false)
            guard parts.count <= 2 else { return nil }
            host = parts[0]
            if parts.count == 2 { port = parts[1] }
        }
        while host.hasSuffix(".") { host = host.dropLast() }
        guard !host.isEmpty else { return nil }
        guard let port else { return String(host) }
        guard !port.isEmpty, port.allSatisfy(\.isASCII), let number = Int(port), (0...65_535).contains(number) else {
            return nil
        }
        let isDefault =
            (scheme == "http" || scheme == "ws") && number == 80
            || (scheme == "https" || scheme == "wss") && number == 443
        return isDefault ? String(host) : "\(host):\(number)"
    }

    static func hostPart(of authority: String) -> String {
        if authority.hasPrefix("["), let end = authority.firstIndex(of: "]") {
            return String(authority[...end])
        }
        return String(authority.prefix { $0 != ":" })
    }
}
