internal import Foundation
internal import NIOConcurrencyHelpers

/// The cookies servers set on a ``BLIPSession``'s handshakes (Sync Gateway's session cookie), sent again on
/// its later attempts to the same server: a small store for one origin at a time, keyed by scheme, host and
/// port (nothing crosses to another server; `Domain` is not honoured, so every cookie is host-only),
/// honouring `Path`, `Secure`, `Max-Age` and `Expires`.
public final class BLIPCookieStore: Sendable {
    struct Cookie: Sendable, Equatable {
        var name: String
        var value: String
        var path: String
        var secure: Bool
        var expires: Date?
    }

    private let cookies = NIOLockedValueBox<[String: [Cookie]]>([:])

    public init() {}

    /// Records the `Set-Cookie` fields of a response to a request for `url`.
    public func store(setCookieFields fields: [String], from url: BLIPWebSocketURL) {
        self.store(setCookieFields: fields, from: url, now: Date())
    }

    /// The `Cookie` field value for a request to `url` (nil when no cookie applies): unexpired cookies of
    /// that origin whose path covers the request's, secure ones only over `wss`; longer paths first.
    public func cookieHeader(for url: BLIPWebSocketURL) -> String? {
        self.cookieHeader(for: url, now: Date())
    }

    func store(setCookieFields fields: [String], from url: BLIPWebSocketURL, now: Date) {
        let parsed = fields.compactMap { Self.parse($0, requestPath: Self.path(of: url), now: now) }
        guard !parsed.isEmpty else { return }
        self.cookies.withLockedValue { cookies in
            var list = cookies[Self.origin(url)] ?? []
            for cookie in parsed {
                list.removeAll { $0.name == cookie.name && $0.path == cookie.path }
                if cookie.expires.map({ $0 > now }) ?? true { list.append(cookie) }
            }
            cookies[Self.origin(url)] = list
        }
    }

    func cookieHeader(for url: BLIPWebSocketURL, now: Date) -> String? {
        let applicable = self.cookies.withLockedValue { cookies -> [Cookie] in
            let key = Self.origin(url)
            cookies[key]?.removeAll { $0.expires.map { $0 <= now } ?? false }
            return (cookies[key] ?? []).filter { cookie in
                (!cookie.secure || url.isSecure) && Self.pathMatches(Self.path(of: url), cookie.path)
            }
        }
        guard !applicable.isEmpty else { return nil }
        return applicable.sorted { $0.path.count > $1.path.count }.map { "\($0.name)=\($0.value)" }
            .joined(separator: "; ")
    }

    static func path(of url: BLIPWebSocketURL) -> String {
        String(url.target.prefix { $0 != "?" })
    }

    static func origin(_ url: BLIPWebSocketURL) -> String {
        "\(url.isSecure ? "wss" : "ws")://\(url.host.lowercased()):\(url.port)"
    }

    /// One `Set-Cookie` value (RFC 6265 5.2), or nil when it has no name.
    static func parse(_ field: String, requestPath: String, now: Date) -> Cookie? {
        let parts = field.split(separator: ";", omittingEmptySubsequences: false).map {
            $0.trimmingCharacters(in: .whitespaces)
        }
        guard let pair = parts.first, let equals = pair.firstIndex(of: "="), equals != pair.startIndex else {
            return nil
        }
        var cookie = Cookie(
            name: String(pair[..<equals]),
            value: String(pair[pair.index(after: equals)...]),
            path: Self.defaultPath(requestPath),
            secure: false,
            expires: nil
        )
        var maxAge: Int?
        for attribute in parts.dropFirst() {
            let (name, value) = Self.attribute(attribute)
            switch name.lowercased() {
            case "path" where value.hasPrefix("/"): cookie.path = value
            case "secure": cookie.secure = true
            case "max-age": maxAge = Int(value)
            case "expires": if maxAge == nil, let date = Self.httpDate(value) { cookie.expires = date }
            default: break
            }
        }
        if let maxAge { cookie.expires = now.addingTimeInterval(TimeInterval(max(0, maxAge))) }
        return cookie
    }

    private static func attribute(_ text: String) -> (String, String) {
        guard let equals = text.firstIndex(of: "=") else { return (text, "") }
        return (
            String(text[..<equals]).trimmingCharacters(in: .whitespaces),
            String(text[text.index(after: equals)...]).trimmingCharacters(in: .whitespaces)
        )
    }

    /// RFC 6265 5.1.4: the request path up to its last slash, or `/`.
    static func defaultPath(_ path: String) -> String {
        guard path.hasPrefix("/"), let slash = path.lastIndex(of: "/"), slash != path.startIndex else { return "/" }
        return String(path[..<slash])
    }

    /// RFC 6265 5.1.4 path-match.
    static func pathMatches(_ requestPath: String, _ cookiePath: String) -> Bool {
        let path = requestPath.isEmpty ? "/" : requestPath
        if path == cookiePath { return true }
        guard path.hasPrefix(cookiePath) else { return false }
        return cookiePath.hasSuffix("/") || path.dropFirst(cookiePath.count).hasPrefix("/")
    }

    private static func httpDate(_ text: String) -> Date? {
        let formatter = DateFormatter()
        formatter.locale = Locale(identifier: "en_US_POSIX")
        formatter.timeZone = TimeZone(identifier: "GMT")
        for format in ["EEE, dd MMM yyyy HH:mm:ss zzz", "EEEE, dd-MMM-yy HH:mm:ss zzz", "EEE MMM d HH:mm:ss yyyy"] {
            formatter.dateFormat = format
            if let date = formatter.date(from: text) { return date }
        }
        return nil
    }
}
