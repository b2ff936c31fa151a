public import BLIP

/// The server answered the WebSocket upgrade request, but not with a usable WebSocket: what it said (status,
/// headers, the start of the body) and a ``Code`` that a retry policy can switch on. Failures to reach the
/// server at all (TCP, TLS) are `BLIPConnectionError` with code `transportFailed`.
public struct BLIPHandshakeError: BLIPClassifiedError, Sendable, CustomStringConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: Hashable, Sendable {
            case unauthorized, forbidden, notFound, subprotocolRefused, redirect, tooManyRedirects, redirectLoop
            case insecureRedirect, rateLimited, serverError, notWebSocket, refused
        }

        private var base: Base

        /// 401: credentials are missing or wrong; ``BLIPHandshakeError/challenges`` says which scheme to use.
        public static let unauthorized = Code(base: .unauthorized)
        /// 403: these credentials may not connect here.
        public static let forbidden = Code(base: .forbidden)
        /// 404: no endpoint (or no database) at this path.
        public static let notFound = Code(base: .notFound)
        /// The server speaks none of the subprotocols offered: a 101 without one of them, or go-blip's
        /// HTTP 500 "I only speak ... protocols".
        public static let subprotocolRefused = Code(base: .subprotocolRefused)
        /// A 3xx that was not followed (redirects off, a 3xx that is not followed, or a Location that is not
        /// a ws, wss, http or https URL); see ``BLIPHandshakeError/location``.
        public static let redirect = Code(base: .redirect)
        /// More redirects than ``BLIPWebSocketClient/Configuration/maximumRedirects``.
        public static let tooManyRedirects = Code(base: .tooManyRedirects)
        /// A redirect back to a URL already requested.
        public static let redirectLoop = Code(base: .redirectLoop)
        /// A redirect from `wss://` to `ws://`, which would send the request (and credentials) in clear.
        public static let insecureRedirect = Code(base: .insecureRedirect)
        /// 429: too many requests; ``BLIPHandshakeError/retryAfter`` may say when to try again.
        public static let rateLimited = Code(base: .rateLimited)
        /// 5xx (other than a subprotocol refusal).
        public static let serverError = Code(base: .serverError)
        /// A success that is not a WebSocket upgrade (200, say, from a web server or proxy), or a 101 that is
        /// not a valid one (wrong `Sec-WebSocket-Accept`, no `Upgrade: websocket`).
        public static let notWebSocket = Code(base: .notWebSocket)
        /// Any other refusal (400, 405, 426...).
        public static let refused = Code(base: .refused)

        public var description: String { String(describing: self.base) }

        /// The kind of a response that is not a 101.
        static func of(status: Int, body: [UInt8]) -> Code {
            switch status {
            case 401: return .unauthorized
            case 403: return .forbidden
            case 404: return .notFound
            case 429: return .rateLimited
            case 500 where body.starts(with: "I only speak ".utf8): return .subprotocolRefused
            case 500..<600: return .serverError
            case 300..<400: return .redirect
            case 100..<300: return .notWebSocket
            default: return .refused
            }
        }
    }

    /// How much of a refusal's body is kept: the client reads no further, so a huge or endless body costs
    /// nothing.
    public static let bodyExcerptLimit = 4096

    public var code: Code
    /// The URL that gave this answer (the last one, after redirects). Without credentials.
    public var url: String
    /// The URLs that redirected before ``url``, in order (empty without redirects).
    public var redirects: [String]
    public var status: Int
    public var reason: String
    public var headers: HTTPFields
    /// The start of the response body, at most ``bodyExcerptLimit`` bytes.
    public var body: [UInt8]
    /// True when the body went on past ``body``.
    public var bodyIsTruncated: Bool
    /// What went wrong, when the status alone does not say (the subprotocols offered, the chain of redirects).
    public var detail: String?
    /// The subprotocols the client offered.
    public var offeredSubprotocols: [String]

    public init(
        code: Code,
        url: String,
        redirects: [String] = [],
        status: Int,
        reason: String,
        headers: HTTPFields = [:],
        body: [UInt8] = [],
        bodyIsTruncated: Bool = false,
        detail: String? = nil,
        offeredSubprotocols: [String] = []
    ) {
        self.code = code
        self.url = url
        self.redirects = redirects
        self.status = status
        self.reason = reason
        self.headers = headers
        self.body = body
        self.bodyIsTruncated = bodyIsTruncated
        self.detail = detail
        self.offeredSubprotocols = offeredSubprotocols
    }

    /// The subprotocols the server speaks, as its refusal names them (go-blip's and this package's HTTP 500
    /// "I only speak A, B protocols"); empty when it did not say.
    public var serverSubprotocols: [String] {
        guard self.code == .subprotocolRefused, self.status == 500 else { return [] }
        let text = self.bodyText.prefix { $0 != "\n" && $0 != "\r" }
        guard text.hasPrefix("I only speak "), text.hasSuffix(" protocols") else { return [] }
        return text.dropFirst("I only speak ".count).dropLast(" protocols".count)
            .split(separator: ",").map { String($0.filter { $0 != " " }) }.filter { !$0.isEmpty }
    }

    /// The challenges of every `WWW-Authenticate` field (a 401 should have at least one).
    public var challenges: [BLIPAuthenticationChallenge] {
        BLIPAuthenticationChallenge.parse(self.headers["WWW-Authenticate"])
    }

    /// The `Location` field as sent (for redirects; it may be relative to ``url``).
    public var location: String? { self.headers.first("Location") }

    /// `Retry-After` in seconds (the HTTP-date form is not parsed).
    public var retryAfter: Duration? {
        self.headers.first("Retry-After").flatMap { Int($0.filter { $0 != " " && $0 != "\t" }) }.map { .seconds($0) }
    }

    /// Whether trying again later can succeed without changing anything: server errors, 429 and 408. A
    /// refusal of credentials, a missing endpoint or a redirect problem needs a change first.
    public var isTransient: Bool {
        self.code == .serverError || self.code == .rateLimited || self.status == 408
    }

    /// The body excerpt as text (invalid UTF-8 repaired).
    public var bodyText: String { String(decoding: self.body, as: UTF8.self) }

    public var description: String {
        var text = "BLIPHandshakeError(\(self.code): HTTP \(self.status) \(self.reason) from \(self.url)"
        if let detail { text += ": \(detail)" }
        let firstLine = self.bodyText.prefix { $0 != "\n" && $0 != "\r" }
        if !firstLine.isEmpty { text += ": \(firstLine)" }
        if !self.redirects.isEmpty { text += " (redirected from \(self.redirects.joined(separator: " -> ")))" }
        return text + ")"
    }
}
