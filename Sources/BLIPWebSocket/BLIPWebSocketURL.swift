internal import Foundation

/// A `ws://` or `wss://` URL, split into what the connection needs.
public struct BLIPWebSocketURL: Hashable, Sendable, CustomStringConvertible {
    public var isSecure: Bool
    public var host: String
    public var port: Int
    /// The request target: path and query (at least "/").
    public var target: String
    /// The user and password of `ws://user:password@host/`, percent-decoded: the client sends them as
    /// `Authorization: Basic`. Never part of ``description``, so that logs and errors do not show them.
    public var user: String?
    public var password: String?

    public init(
        isSecure: Bool,
        host: String,
        port: Int? = nil,
        target: String = "/",
        user: String? = nil,
        password: String? = nil
    ) {
        self.isSecure = isSecure
        self.host = host
        self.port = port ?? (isSecure ? 443 : 80)
        self.target = target.isEmpty ? "/" : target
        self.user = user
        self.password = password
    }

    /// Parses `ws://host[:port][/path][?query]` or `wss://...`; IPv6 hosts go in brackets.
    public init?(_ string: String) {
        let secure: Bool
        var rest: Substring
        if string.lowercased().hasPrefix("wss://") {
            secure = true
            rest = string.dropFirst(6)
        } else if string.lowercased().hasPrefix("ws://") {
            secure = false
            rest = string.dropFirst(5)
        } else {
            return nil
        }
        let authorityEnd = rest.firstIndex { $0 == "/" || $0 == "?" } ?? rest.endIndex
        var authority = rest[..<authorityEnd]
        rest = rest[authorityEnd...]
        var user: String?
        var password: String?
        if let at = authority.lastIndex(of: "@") {
            let userinfo = authority[..<at]
            let colon = userinfo.firstIndex(of: ":")
            user = Self.percentDecoded(userinfo[..<(colon ?? userinfo.endIndex)])
            password = colon.map { Self.percentDecoded(userinfo[userinfo.index(after: $0)...]) }
            authority = authority[authority.index(after: at)...]
        }
        var host: Substring
        var port: Int?
        if authority.hasPrefix("[") {
            guard let close = authority.firstIndex(of: "]") else { return nil }
            host = authority[authority.index(after: authority.startIndex)..<close]
            let after = authority[authority.index(after: close)...]
            if after.hasPrefix(":") {
                guard let value = Int(after.dropFirst()) else { return nil }
                port = value
            } else if !after.isEmpty {
                return nil
            }
        } else if let colon = authority.lastIndex(of: ":") {
            host = authority[..<colon]
            guard let value = Int(authority[authority.index(after: colon)...]) else { return nil }
            port = value
        } else {
            host = authority
        }
        guard !host.isEmpty, (port ?? 1) > 0, (port ?? 1) < 65_536 else { return nil }
        let target = rest.hasPrefix("?") ? "/" + rest : String(rest)
        self.init(isSecure: secure, host: String(host), port: port, target: target, user: user, password: password)
    }

    /// `%XX` escapes decoded; text that is not validly escaped is taken as it is.
    private static func percentDecoded(_ text: Substring) -> String {
        String(text).removingPercentEncoding ?? String(text)
    }

    /// `Basic base64(user:password)` (RFC 7617) when the URL has a user.
    var basicAuthorization: String? {
        guard let user = self.user else { return nil }
        return "Basic " + Data("\(user):\(self.password ?? "")".utf8).base64EncodedString()
    }

    /// Scheme, host and port: a redirect to another origin does not take the credentials along.
    func hasSameOrigin(as other: BLIPWebSocketURL) -> Bool {
        self.isSecure == other.isSecure && self.host.lowercased() == other.host.lowercased()
            && self.port == other.port
    }

    /// The `Host` header: the host, with the port unless it is the scheme's default.
    public var hostHeader: String {
        let host = Self.uriHost(self.host)
        return self.port == (self.isSecure ? 443 : 80) ? host : "\(host):\(self.port)"
    }

    /// `host` as it is written in a URL or a `Host` header: an IPv6 address in brackets (RFC 3986).
    static func uriHost(_ host: String) -> String {
        host.contains(":") ? "[\(host)]" : host
    }

    public var description: String {
        "\(self.isSecure ? "wss" : "ws")://\(self.hostHeader)\(self.target)"
    }
}
