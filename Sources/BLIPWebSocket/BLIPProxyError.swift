/// The proxy did not open the way to the server: it could not be reached, refused (with its status), closed,
/// or took too long. A ``Kind`` that a retry policy can switch on; what the server itself answers is a
/// ``BLIPHandshakeError`` as without a proxy.
public struct BLIPProxyError: Error, Sendable, CustomStringConvertible {
    public struct Kind: Hashable, Sendable, CustomStringConvertible {
        private enum Base: Hashable, Sendable {
            case unreachable, authenticationRequired, refused, closed, timedOut, invalidResponse
        }

        private var base: Base

        /// No TCP connection to the proxy (refused, unreachable, or not within the connect timeout).
        public static let unreachable = Kind(base: .unreachable)
        /// 407 (or 401, which some proxies send for wrong credentials): the proxy wants credentials, or other
        /// ones; ``BLIPProxyError/challenges`` says which scheme.
        public static let authenticationRequired = Kind(base: .authenticationRequired)
        /// Any other status than 2xx: 403 (the proxy may not reach that host or port), 502 (it could not),
        /// and so on; see ``BLIPProxyError/status``.
        public static let refused = Kind(base: .refused)
        /// The proxy closed the connection before the tunnel was open.
        public static let closed = Kind(base: .closed)
        /// The tunnel was not open within the handshake timeout.
        public static let timedOut = Kind(base: .timedOut)
        /// A 2xx with a body, or an answer that is not HTTP.
        public static let invalidResponse = Kind(base: .invalidResponse)

        public var description: String { String(describing: self.base) }
    }

    public var kind: Kind
    /// The proxy, without credentials.
    public var proxy: String
    /// The status the proxy answered, if it answered.
    public var status: Int?
    public var reason: String?
    public var headers: BLIPHTTPFields
    public var underlying: (any Error)?

    public init(
        kind: Kind,
        proxy: String,
        status: Int? = nil,
        reason: String? = nil,
        headers: BLIPHTTPFields = [:],
        underlying: (any Error)? = nil
    ) {
        self.kind = kind
        self.proxy = proxy
        self.status = status
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
    /// server (502, 503, 504), closed, timed out or could not be reached itself.
    public var isTransient: Bool {
        switch self.kind {
        case .unreachable, .closed, .timedOut: true
        case .refused: [502, 503, 504].contains(self.status ?? 0)
        default: false
        }
    }

    public var description: String {
        var text = "BLIPProxyError(\(self.kind) from proxy \(self.proxy)"
        if let status = self.status { text += ": HTTP \(status) \(self.reason ?? "")" }
        if let underlying = self.underlying { text += ": \(underlying)" }
        return text + ")"
    }
}
