internal import Foundation

extension BLIPProxy {
    /// The proxy that curl would take from `environment` for a URL of this host, port and security, or nil
    /// to connect directly. `ws://` reads `ws_proxy`, then `http_proxy`; `wss://` reads `wss_proxy`, then
    /// `https_proxy`; both then `all_proxy`. Each name in lower case before upper case, except
    /// `HTTP_PROXY`, which curl ignores (a CGI program gets a request's `Proxy:` header under that name); an
    /// empty variable counts as unset. `no_proxy` lists hosts reached directly, separated by commas or
    /// blanks: `*` alone for all; a name, which also covers its subdomains (leading and trailing dots do not
    /// matter); an IP address or a CIDR range such as `10.0.0.0/8`. Beyond curl, as Go reads it, an entry
    /// with `:port` covers that port only.
    ///
    /// A value without a scheme is an HTTP proxy. Throws ``BLIPProxyError`` (code `invalidResponse`) for
    /// one this package cannot use (`https://`, `socks4://`, garbage): connecting directly instead could go
    /// around a proxy the network requires.
    public static func fromEnvironment(
        host: String,
        port: Int,
        isSecure: Bool,
        environment: [String: String]
    ) throws -> BLIPProxy? {
        func value(_ name: String, uppercase: Bool = true) -> String? {
            let names = uppercase ? [name, name.uppercased()] : [name]
            return names.lazy.compactMap { environment[$0] }.first { !$0.isEmpty }
        }
        if let noProxy = value("no_proxy"), Self.bypasses(noProxy: noProxy, host: host, port: port) { return nil }
        let specific =
            isSecure
            ? value("wss_proxy") ?? value("https_proxy") : value("ws_proxy") ?? value("http_proxy", uppercase: false)
        guard let text = specific ?? value("all_proxy") else { return nil }
        let url = text.contains("://") ? text : "http://" + text
        guard let proxy = BLIPProxy(url: url) else {
            let shown = url.split(separator: "@").last.map(String.init) ?? ""  // never the credentials
            throw BLIPProxyError(
                code: .invalidResponse,
                proxy: shown,
                reason: "the environment names a proxy this client cannot use (http:// and socks5:// only)"
            )
        }
        return proxy
    }

    /// Whether `no_proxy` says to reach this host and port directly.
    static func bypasses(noProxy: String, host: String, port: Int) -> Bool {
        if noProxy.trimmingCharacters(in: .whitespaces) == "*" { return true }
        var host = host.lowercased()
        if host.hasSuffix(".") { host.removeLast() }
        let address = Self.addressBytes(host.hasPrefix("[") ? String(host.dropFirst().dropLast()) : host)
        for rawEntry in noProxy.split(whereSeparator: { $0 == "," || $0.isWhitespace }) {
            var entry = rawEntry.lowercased()
            // An optional port: after the last colon of a name or IPv4 address, or after "]" of IPv6.
            if let (name, entryPort) = Self.splitPort(entry) {
                guard entryPort == port else { continue }
                entry = name
            }
            if entry.hasPrefix("[") && entry.hasSuffix("]") { entry = String(entry.dropFirst().dropLast()) }
            if let address {
                if Self.address(address, isIn: entry) { return true }
                continue
            }
            if entry.hasPrefix(".") { entry.removeFirst() }
            if entry.hasSuffix(".") { entry.removeLast() }
            if entry.isEmpty { continue }
            if host == entry || host.hasSuffix("." + entry) { return true }
        }
        return false
    }

    /// `name:port` or `[v6]:port` split; nil for an entry without a port (a bare IPv6 address has colons
    /// but no brackets).
    private static func splitPort(_ entry: String) -> (String, Int)? {
        guard let colon = entry.lastIndex(of: ":"), let port = Int(entry[entry.index(after: colon)...]) else {
            return nil
        }
        let name = String(entry[..<colon])
        if name.hasPrefix("[") { return name.hasSuffix("]") ? (name, port) : nil }
        return name.contains(":") ? nil : (name, port)
    }

    /// Whether the address is the entry's address, or in its CIDR range.
    private static func address(_ hostBytes: [UInt8], isIn entry: String) -> Bool {
        let parts = entry.split(separator: "/", maxSplits: 1)
        guard let first = parts.first, let networkBytes = Self.addressBytes(String(first)),
            hostBytes.count == networkBytes.count
        else { return false }
        let bits = parts.count == 2 ? Int(parts[1]) ?? -1 : hostBytes.count * 8
        guard (0...hostBytes.count * 8).contains(bits) else { return false }
        for index in 0..<hostBytes.count {
            let remaining = bits - index * 8
            if remaining <= 0 { break }
            let mask: UInt8 = remaining >= 8 ? 0xFF : ~(0xFF >> UInt8(remaining))
            if hostBytes[index] & mask != networkBytes[index] & mask { return false }
        }
        return true
    }

    /// The 4 or 16 bytes of an IPv4 or IPv6 address literal; nil for a name.
    private static func addressBytes(_ text: String) -> [UInt8]? {
        var bytes = [UInt8](repeating: 0, count: 16)
        if inet_pton(AF_INET, text, &bytes) == 1 { return Array(bytes.prefix(4)) }
        if inet_pton(AF_INET6, text, &bytes) == 1 { return bytes }
        return nil
    }
}
