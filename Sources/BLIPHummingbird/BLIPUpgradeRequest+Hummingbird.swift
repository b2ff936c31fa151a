public import BLIPWebSocket
public import Hummingbird

extension BLIPUpgradeRequest {
    /// The upgrade request as the standalone server's upgrade handler sees it, for a mount's
    /// `shouldUpgrade`: the same helpers on both (`basicCredentials`,
    /// `bearerToken`, `sessionToken`, `cookie(named:)`, `userAgent`).
    ///
    /// - Parameters:
    ///   - request: The Hummingbird request `shouldUpgrade` was given.
    ///   - pathParameters: What the route's `{name}` segments captured (`context.parameters`), if the
    ///     decision needs them.
    public init(_ request: Request, pathParameters: [String: String] = [:]) {
        self.init(
            method: request.method.rawValue,
            uri: request.uri.description,
            headers: request.headers,
            pathParameters: pathParameters
        )
    }
}
