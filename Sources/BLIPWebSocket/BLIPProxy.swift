internal import Foundation

/// A proxy between the client and the server: an HTTP proxy asked for a tunnel with `CONNECT`, or a SOCKS5
/// proxy. Either way the proxy only relays bytes: `wss://` runs its TLS end to end through it, so the proxy
/// sees neither the handshake nor the messages.
public struct BLIPProxy: Hashable, Sendable, CustomStringConvertible {
    enum Scheme: String, Hashable, Sendable {
        case httpConnect = "http"
        case socks5 = "socks5"
    }

    let scheme: Scheme
    public var host: String
    public var port: Int
    /// `Proxy-Authorization: Basic` for an HTTP proxy, username/password authentication (RFC 1929) for a
    /// SOCKS5 proxy, with ``password``.
    public var username: String?
    public var password: String?

    /// An HTTP proxy that opens `CONNECT` tunnels (tinyproxy, Squid, most corporate proxies).
    public static func http(host: String, port: Int = 1080, username: String? = nil, password: String? = nil)
        -> BLIPProxy
    {
        BLIPProxy(scheme: .httpConnect, host: host, port: port, username: username, password: password)
    }

    /// A SOCKS5 proxy (RFC 1928), without authentication or with a username and password (RFC 1929). The
    /// server's name is sent to the proxy, which resolves it (what curl calls `socks5h`).
    public static func socks5(host: String, port: Int = 1080, username: String? = nil, password: String? = nil)
        -> BLIPProxy
    {
        BLIPProxy(scheme: .socks5, host: host, port: port, username: username, password: password)
    }

    /// Parses a proxy URL as curl's `--proxy` and `HTTPS_PROXY` take it: `http://`, `socks5://` or
    /// `socks5h://`, then `[user[:password]@]host[:port]`; the port defaults to 1080, user and password are
    /// percent-decoded. Nil for any other scheme or without a host.
    ///
    /// `socks5://` and `socks5h://` both let the proxy resolve the server's name: a proxy is often the only
    /// one that can.
    public init?(url: String) {
        guard let components = URLComponents(string: url), let scheme = components.scheme?.lowercased(),
            let host = components.host, !host.isEmpty
        else { return nil }
        switch scheme {
        case "http": self.scheme = .httpConnect
        case "socks5", "socks5h": self.scheme = .socks5
        default: return nil
        }
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
        "\(self.scheme.rawValue)://\(BLIPWebSocketURL.uriHost(self.host)):\(self.port)"
    }
}
