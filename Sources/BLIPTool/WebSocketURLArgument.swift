internal import ArgumentParser
internal import BLIPWebSocket
internal import Foundation

/// Checks a `ws://` or `wss://` URL given on the command line, so that a wrong one is a usage error (64) that
/// says what is wrong with it, not a failed connection.
enum WebSocketURLArgument {
    /// Throws a `ValidationError` naming `name` (the argument or flag) and what is wrong with `url`.
    static func check(_ url: String, as name: String) throws {
        if let problem = self.problem(with: url) { throw ValidationError("\(name): \(problem)") }
    }

    /// What is wrong with `url`, or nil when it is a usable ws:// or wss:// URL. The URL is repeated without
    /// its credentials.
    static func problem(with url: String) -> String? {
        let shown = self.withoutCredentials(url)
        let lowered = url.lowercased()
        guard lowered.hasPrefix("ws://") || lowered.hasPrefix("wss://") else {
            return "'\(shown)' is not a ws:// or wss:// URL"
        }
        if BLIPWebSocketURL(url) != nil { return nil }
        var authority = url[url.range(of: "://")!.upperBound...].prefix { $0 != "/" && $0 != "?" && $0 != "#" }
        if let at = authority.lastIndex(of: "@") { authority = authority[authority.index(after: at)...] }
        if authority.hasPrefix("[") && !authority.contains("]") {
            return "the IPv6 address of \(shown) has no closing ']'"
        }
        let hostEnd = authority.hasPrefix("[") ? authority.firstIndex(of: "]").map(authority.index(after:)) : nil
        let afterHost = authority[(hostEnd ?? authority.startIndex)...]
        if let colon = afterHost.firstIndex(of: ":") {
            let port = afterHost[afterHost.index(after: colon)...]
            if Int(port).map({ !(1...65_535).contains($0) }) ?? true {
                return "the port of \(shown) must be 1 to 65535, not '\(port)'"
            }
        }
        if authority.isEmpty || authority.hasPrefix(":") { return "\(shown) has no host" }
        return "'\(shown)' is not a usable ws:// or wss:// URL"
    }

    /// `url` with `user:password@` left out of its authority.
    static func withoutCredentials(_ url: String) -> String {
        guard let scheme = url.range(of: "://") else { return url }
        let rest = url[scheme.upperBound...]
        let authorityEnd = rest.firstIndex { $0 == "/" || $0 == "?" || $0 == "#" } ?? rest.endIndex
        guard let at = rest[..<authorityEnd].lastIndex(of: "@") else { return url }
        return String(url[..<scheme.upperBound]) + String(rest[rest.index(after: at)...])
    }
}
