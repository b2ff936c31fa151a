internal import Foundation

/// A proxy between the client and the server. An HTTP proxy is asked for a tunnel with `CONNECT`; `wss://`
/// runs its TLS end to end through the tunnel, so the proxy sees neither the handshake nor the messages.
public struct BLIPProxy: Hashable, Sendable, CustomStringConvertible {
    enum Scheme: Hashable, Sendable {
        case httpConnect
    }

    let scheme: Scheme
    public var host: String
    public var port: Int
    /// Sent as `Proxy-Authorization: Basic` with ``password``.
    public var username: String?
    public var password: String?

    /// An HTTP proxy that opens `CONNECT` tunnels (tinyproxy, Squid, most corporate proxies).
    public static func http(host: String, port: Int = 1080, username: String? = nil, password: String? = nil)
        -> BLIPProxy
    {
        BLIPProxy(scheme: .httpConnect, host: host, port: port, username: username, password: password)
    }

    /// Parses `http://[user[:password]@]host[:port]`, as curl's `--proxy` and `HTTPS_PROXY` take it: the port
    /// defaults to 1080, user and password are percent-decoded. Nil for anything else.
    public init?(url: String) {
        guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(),
            scheme == "http", let host = components.host, !host.isEmpty
        else { return nil }
        self.scheme = .httpConnect
        self.host = host.hasPrefix("[") && host.hasSuffix("]") ? String(host.dropFirst().dropLast()) : host
        self.port = components.port ?? 1080
        self.username = components.user?.removingPercentEncoding ?? components.user
        self.password = components.password?.removingPercentEncoding ?? components.password
    }

    private init(scheme: Scheme, host: String, port: Int, username: String?, password: String?) {
        self.scheme = scheme
        self.host = host
        self.port = port
        self.username = username
        self.password = password
    }

    /// The credentials as a `Proxy-Authorization` value, if there are any.
    var basicAuthorization: String? {
        guard let username else { return nil }
        return "Basic " + Data("\(username):\(self.password ?? "")".utf8).base64EncodedString()
    }

    /// Scheme, host and port; never the credentials, so that logs and errors do not show them.
    public var description: String {
        "http://\(BLIPWebSocketURL.uriHost(self.host)):\(self.port)"
    }
}
