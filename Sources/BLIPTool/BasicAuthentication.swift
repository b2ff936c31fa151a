internal import BLIPWebSocket

/// `blip serve --require-basic user:password`: one user, checked on every WebSocket upgrade, so that
/// clients' authentication can be tested against a server that asks for it the way Sync Gateway does.
struct BasicAuthentication: Sendable {
    static let realm = "blip"

    let user: String
    let password: String

    /// From `user:password`; nil when the user name is empty.
    init?(_ credentials: String) {
        guard let colon = credentials.firstIndex(of: ":"), colon != credentials.startIndex else { return nil }
        self.user = String(credentials[..<colon])
        self.password = String(credentials[credentials.index(after: colon)...])
    }

    /// Accepts with the user name as the connection's identity, or answers 401 with a Basic challenge.
    var upgradeHandler: BLIPWebSocketServer.UpgradeHandler {
        { request in
            guard let given = request.basicCredentials, Self.equal(given.user, self.user),
                Self.equal(given.password, self.password)
            else {
                return .unauthorized(realm: Self.realm)
            }
            return .accept(identity: self.user)
        }
    }

    /// Compares without stopping at the first difference, so that the time taken does not tell how much of
    /// a guess was right.
    private static func equal(_ a: String, _ b: String) -> Bool {
        let (x, y) = (Array(a.utf8), Array(b.utf8))
        guard x.count == y.count else { return false }
        return zip(x, y).reduce(0) { $0 | ($1.0 ^ $1.1) } == 0
    }
}
