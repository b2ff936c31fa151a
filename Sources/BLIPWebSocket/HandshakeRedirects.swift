internal import Foundation

/// Decides, one refusal at a time, whether the handshake follows a redirect, and remembers the chain so
/// that a loop, too long a chain or a downgrade to `ws://` ends in an error that lists it.
struct HandshakeRedirects {
    /// The statuses that mean "ask there instead"; all keep the GET of an upgrade request as it is.
    static let followedStatuses: Set<Int> = [301, 302, 303, 307, 308]

    let maximum: Int
    /// The URLs that redirected so far, in order.
    private(set) var chain: [BLIPWebSocketURL] = []

    init(maximum: Int) {
        self.maximum = maximum
    }

    /// The URL to ask next after `error` came from `url`. Throws `error` (now listing the chain) when it is
    /// not a redirect to follow, and a redirect error when the chain must end.
    mutating func follow(_ error: BLIPHandshakeError, from url: BLIPWebSocketURL) throws(BLIPHandshakeError)
        -> BLIPWebSocketURL
    {
        var error = error
        error.redirects = self.chain.map(\.description)
        guard error.code == .redirect, self.maximum > 0, Self.followedStatuses.contains(error.status),
            let location = error.location
        else {
            throw error
        }
        guard let next = Self.resolve(location, against: url) else {
            error.detail = "the Location is not a ws, wss, http or https URL"
            throw error
        }
        self.chain.append(url)
        if self.chain.contains(where: { $0.description == next.description }) {
            error.code = .redirectLoop
            error.detail = "redirected back to \(next)"
        } else if self.chain.count > self.maximum {
            error.code = .tooManyRedirects
            error.detail = "more than \(self.maximum) redirects; the next would be \(next)"
        } else if url.isSecure && !next.isSecure {
            error.code = .insecureRedirect
            error.detail = "refused to follow wss:// to \(next)"
        } else {
            return next
        }
        throw error
    }

    /// `location` resolved against `url` (RFC 3986), http and https taken as ws and wss (the upgrade is an
    /// HTTP request, and some proxies answer with http URLs); the fragment dropped.
    static func resolve(_ location: String, against url: BLIPWebSocketURL) -> BLIPWebSocketURL? {
        let location = location.trimmingCharacters(in: .whitespaces)
        guard let base = URL(string: url.description),
            let resolved = URL(string: location, relativeTo: base)?.absoluteString
        else {
            return nil
        }
        var text = String(resolved.prefix { $0 != "#" })
        if text.lowercased().hasPrefix("http://") {
            text = "ws://" + text.dropFirst("http://".count)
        } else if text.lowercased().hasPrefix("https://") {
            text = "wss://" + text.dropFirst("https://".count)
        }
        return BLIPWebSocketURL(text)
    }
}
