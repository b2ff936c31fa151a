internal import BLIPWebSocket
internal import NIOConcurrencyHelpers

/// `blip serve --session-token TOKEN`: one-time session tokens, as Sync Gateway 3.3+ takes from browsers in
/// a `SyncGatewaySession_<token>` subprotocol entry. Each token admits one connection; a used or unknown
/// token, or none (when tokens are the only way in), gets 401.
final class SessionTokens: Sendable {
    private let unused: NIOLockedValueBox<Set<String>>

    init(_ tokens: [String]) {
        self.unused = NIOLockedValueBox(Set(tokens))
    }

    /// Uses `token` up; false if it was unknown or used already.
    func take(_ token: String) -> Bool {
        self.unused.withLockedValue { $0.remove(token) != nil }
    }
}

/// How `blip serve` decides who may connect: a session token, when one is offered and tokens are
/// configured, else Basic credentials when they are required; nil when neither is configured.
enum ServeAuthentication {
    static func upgradeHandler(
        basic: BasicAuthentication?,
        tokens: SessionTokens?
    ) -> BLIPWebSocketServer.UpgradeHandler? {
        guard basic != nil || tokens != nil else { return nil }
        let basicHandler = basic?.upgradeHandler
        return { request in
            if let tokens, let token = request.sessionToken {
                return tokens.take(token)
                    ? .accept(identity: "session") : .unauthorized(realm: BasicAuthentication.realm)
            }
            if let basicHandler { return try await basicHandler(request) }
            return .unauthorized(realm: BasicAuthentication.realm)
        }
    }
}
