/// Who may use a server that serves web pages (the web bridge's static files, a ``PlainHTTPService``), judged by the `Host` and `Origin`
/// headers: a loopback address is not a boundary against the web pages in the user's own browser.
///
/// - A page from any site can open `ws://127.0.0.1:PORT/`; browsers say where it came from in `Origin`.
///   An upgrade with an `Origin` is accepted only from the server's own pages (the origin is the `Host`
///   it asked for) or from ``PlainHTTPService/allowedOrigins``. Clients that send no `Origin` (apps,
///   Couchbase Lite, go-blip) are not browsers and are not affected.
/// - A site can also rebind its own name to 127.0.0.1 (DNS rebinding): its page is then same-origin with
///   the server under the site's name. So unless ``PlainHTTPService/servesRemoteClients`` is on, the
///   `Host` must name this machine (`127.0.0.1`, `[::1]`, `localhost`) for files and for same-origin
///   upgrades.
///
/// Origins are otherwise checked as on every endpoint (``OriginRule``), with `allowedOrigins` being the
/// server's and the files' allowed origins together.
package struct BrowserOriginRule: Sendable, Hashable {
    let origins: OriginRule
    /// ``PlainHTTPService/servesRemoteClients``: any client address and any `Host` may have files.
    package let allowsAnyHost: Bool

    package init(_ files: any PlainHTTPService, allowedOrigins: [String] = []) {
        self.origins = OriginRule(allowedOrigins: allowedOrigins + files.allowedOrigins)
        self.allowsAnyHost = files.servesRemoteClients
    }

    /// Whether a plain request with this `Host` may get files.
    package func allowsFiles(host: String?) -> Bool {
        self.allowsAnyHost || host.map(Self.namesThisMachine) == true
    }

    /// Whether an upgrade with this `Origin` (nil: none sent) and `Host` may go on.
    func allowsUpgrade(origin: String?, host: String?) -> Bool {
        guard let origin else { return true }
        if self.origins.isAllowListed(origin) { return true }
        return self.allowsFiles(host: host) && OriginRule.isSameOrigin(origin, host: host)
    }

    /// Whether a `Host` value (a name or address, perhaps with a port) is this machine's loopback.
    static func namesThisMachine(_ host: String) -> Bool {
        let name: Substring
        if host.hasPrefix("[") {
            guard let end = host.firstIndex(of: "]") else { return false }
            name = host[host.index(after: host.startIndex)..<end]
        } else {
            name = host.prefix { $0 != ":" }
        }
        switch name.lowercased() {
        case "localhost", "::1": return true
        default: return name.hasPrefix("127.") && name.split(separator: ".").count == 4
        }
    }
}
