public import BLIP

/// The proxy did not open the way to the server: it could not be reached, refused (with its status), closed,
/// or took too long. A ``Code`` that a retry policy can switch on; what the server itself answers is a
/// ``BLIPHandshakeError`` as without a proxy.
public struct BLIPProxyError: BLIPClassifiedError, Sendable, CustomStringConvertible {
    public struct Code: Hashable, Sendable, CustomStringConvertible {
        private enum Base: Hashable, Sendable {
            case unreachable, authenticationRequired, refused, closed, timedOut, invalidResponse
        }

        private var base: Base

        /// No TCP connection to the proxy (refused, unreachable, or not within the connect timeout).
        public static let unreachable = Code(base: .unreachable)
        /// 407 (or 401, which some proxies send for wrong credentials): the proxy wants credentials, or other
        /// ones; ``BLIPProxyError/challenges`` says which scheme. A SOCKS5 proxy that accepts none of the
        /// offered methods, or rejects the username and password.
        public static let authenticationRequired = Code(base: .authenticationRequired)
        /// Any other status than 2xx: 403 (the proxy may not reach that host or port), 502 (it could not),
        /// and so on; see ``BLIPProxyError/status``. From a SOCKS5 proxy, any reply but success; see
        /// ``BLIPProxyError/socksReply``.
        public static let refused = Code(base: .refused)
        /// The proxy closed the connection before the tunnel was open.
        public static let closed = Code(base: .closed)
        /// The tunnel was not open within the handshake timeout.
        public static let timedOut = Code(base: .timedOut)
        /// A 2xx with a body, or an answer that is not HTTP.
        public static let invalidResponse = Code(base: .invalidResponse)

        public var description: String { String(describing: self.base) }
    }

    public var code: Code
    /// The proxy, without credentials.
    public var proxy: String
    /// The HTTP status the proxy answered, if it answered.
    public var status: Int?
    /// The reply code of a SOCKS5 proxy's refusal (RFC 1928, section 6): 1 general failure, 2 not allowed by
    /// its rules, 3 network unreachable, 4 host unreachable, 5 connection refused, 6 TTL expired, 7 command
    /// not supported, 8 address type not supported.
    public var socksReply: UInt8?
    public var reason: String?
    public var headers: HTTPFields
    public var underlying: (any Error)?

    public init(
        code: Code,
        proxy: String,
        status: Int? = nil,
        socksReply: UInt8? = nil,
        reason: String? = nil,
        headers: HTTPFields = [:],
        underlying: (any Error)? = nil
    ) {
        self.code = code
        self.proxy = proxy
        self.status = status
        self.socksReply = socksReply
        self.reason = reason
        self.headers = headers
        self.underlying = underlying
    }

    /// The challenges of every `Proxy-Authenticate` field (a 407 should have at least one), or of
    /// `WWW-Authenticate` for a proxy that answers with 401.
    public var challenges: [BLIPAuthenticationChallenge] {
        let proxy = self.headers["Proxy-Authenticate"]
        return BLIPAuthenticationChallenge.parse(proxy.isEmpty ? self.headers["WWW-Authenticate"] : proxy)
    }

    /// Whether trying again later can succeed without changing anything: a proxy that could not reach the
    /// server (HTTP 502, 503, 504; SOCKS5 replies 1, 3, 4, 5, 6), closed, timed out or could not be reached
    /// itself.
    public var isTransient: Bool {
        switch self.code {
        case .unreachable, .closed, .timedOut: true
        case .refused:
            if let reply = self.socksReply {
                [1, 3, 4, 5, 6].contains(reply)
            } else {
                [502, 503, 504].contains(self.status ?? 0)
            }
        default: false
        }
    }

    public var description: String {
        var text = "BLIPProxyError(\(self.code) from proxy \(self.proxy)"
        if let status = self.status { text += ": HTTP \(status) \(self.reason ?? "")" }
        if let reply = self.socksReply { text += ": SOCKS5 reply \(reply) \(self.reason ?? "")" }
        if self.status == nil, self.socksReply == nil, let reason = self.reason { text += ": \(reason)" }
        if let underlying = self.underlying { text += ": \(underlying)" }
        return text + ")"
    }
}
