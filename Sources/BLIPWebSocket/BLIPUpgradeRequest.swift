internal import Foundation

/// A client's request to upgrade to WebSocket, as the server's upgrade handler sees it: enough to decide
/// who the client is and what it may reach (its credentials, cookies, certificate, the database in its
/// path). It stays available on the accepted connection as ``BLIP/BLIPConnection/upgradeRequest``.
public struct BLIPUpgradeRequest: Sendable {
    /// The HTTP method (always `GET` by the time a handler sees it).
    public var method: String
    /// The request target as sent: path and query, still percent-encoded.
    public var uri: String
    /// The part of ``uri`` before any `?`, still percent-encoded.
    public var path: String
    /// The part of ``uri`` after the first `?`, still percent-encoded; nil when there is no `?`.
    public var query: String?
    /// Every request header, in order.
    public var headers: HTTPFields
    /// The client's address, `host:port` (`[host]:port` for IPv6); nil when unknown.
    public var remoteAddress: String?
    /// The client's certificate chain, leaf first, as DER bytes; empty without TLS or without a client
    /// certificate.
    public var peerCertificateChain: [[UInt8]]
    /// What the `{name}` segments of the server's path pattern captured, percent-decoded.
    public var pathParameters: [String: String]
    /// The subprotocol the server chose; nil for a client of the seed dialect.
    public var subprotocol: String?

    public init(
        method: String = "GET",
        uri: String,
        headers: HTTPFields = [:],
        remoteAddress: String? = nil,
        peerCertificateChain: [[UInt8]] = [],
        pathParameters: [String: String] = [:],
        subprotocol: String? = nil
    ) {
        self.method = method
        self.uri = uri
        if let question = uri.firstIndex(of: "?") {
            self.path = String(uri[..<question])
            self.query = String(uri[uri.index(after: question)...])
        } else {
            self.path = uri
            self.query = nil
        }
        self.headers = headers
        self.remoteAddress = remoteAddress
        self.peerCertificateChain = peerCertificateChain
        self.pathParameters = pathParameters
        self.subprotocol = subprotocol
    }

    /// The user name and password of an `Authorization: Basic` header (RFC 7617), or nil when there is
    /// none or it is malformed. The password may contain colons; the user name cannot.
    public var basicCredentials: (user: String, password: String)? {
        guard let authorization = self.headers.first("Authorization") else { return nil }
        let parts = authorization.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2, parts[0].lowercased() == "basic",
            let decoded = Data(base64Encoded: String(parts[1]).trimmingCharacters(in: .whitespaces)),
            let text = String(data: decoded, encoding: .utf8),
            let colon = text.firstIndex(of: ":")
        else { return nil }
        return (String(text[..<colon]), String(text[text.index(after: colon)...]))
    }

    /// The token of an `Authorization: Bearer` header (RFC 6750), or nil when there is none.
    public var bearerToken: String? {
        guard let authorization = self.headers.first("Authorization") else { return nil }
        let parts = authorization.split(separator: " ", maxSplits: 1, omittingEmptySubsequences: true)
        guard parts.count == 2, parts[0].lowercased() == "bearer" else { return nil }
        let token = parts[1].trimmingCharacters(in: .whitespaces)
        return token.isEmpty ? nil : token
    }

    /// The one-time session token the client offered as a `SyncGatewaySession_<token>` subprotocol entry (how
    /// browsers authenticate to Sync Gateway 3.3+), or nil. The server never echoes it: the 101 names the
    /// BLIP subprotocol only. Like the other credentials, it is never logged.
    public var sessionToken: String? {
        let prefix = BLIPSubprotocol.sessionTokenPrefix
        for offer in BLIPSubprotocol.parseOffers(self.headers["Sec-WebSocket-Protocol"]) where offer.hasPrefix(prefix) {
            let token = offer.dropFirst(prefix.count)
            if !token.isEmpty { return String(token) }
        }
        return nil
    }

    /// The client's `User-Agent` (Couchbase Lite sends its version and platform; Sync Gateway logs it), or
    /// nil.
    public var userAgent: String? { self.headers.first("User-Agent") }

    /// The value of the cookie called `name` in the request's `Cookie` headers (RFC 6265 5.4), or nil.
    /// Surrounding double quotes are kept, as RFC 6265 says the value includes them.
    public func cookie(named name: String) -> String? {
        for pair in self.headers.cookies {
            guard let equals = pair.firstIndex(of: "=") else { continue }
            if pair[..<equals] == name { return String(pair[pair.index(after: equals)...]) }
        }
        return nil
    }
}
