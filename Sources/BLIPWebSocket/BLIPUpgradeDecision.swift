/// What a server's upgrade handler decides about a WebSocket upgrade request.
///
/// ```swift
/// let server = try await BLIPWebSocketServer.bind(configuration: configuration, router: router) { request in
///     guard let (user, password) = request.basicCredentials, await users.check(user, password) else {
///         return .unauthorized(realm: "blip")
///     }
///     return .accept(identity: user, headers: ["Set-Cookie": "Session=\(await sessions.new(user))"])
/// }
/// ```
public enum BLIPUpgradeDecision: Sendable {
    /// Upgrade. `identity` becomes the connection's `BLIPConnection.identity` (seen by every handler as
    /// `BLIPRequestContext.identity`); `headers` are added to the `101 Switching Protocols` response.
    /// The handshake's own fields (`Upgrade`, `Connection`, `Sec-WebSocket-*`) cannot be set here.
    case accept(identity: (any Sendable)?, headers: HTTPFields)
    /// Answer with `status` (300 to 599), `headers` and `body`, then close the connection. The body is at
    /// most ``maximumRefusalBodySize`` bytes of UTF-8; `Content-Length` and `Connection` are the server's.
    /// A decision breaking these rules is answered with a bare 500 instead, and logged.
    case refuse(status: Int, headers: HTTPFields, body: String)

    /// The largest refusal body, in bytes: a refusal is a short explanation, and the server holds it in
    /// memory per refused connection.
    public static let maximumRefusalBodySize = 64 * 1024

    /// Upgrade, with no identity and no extra headers (what a server without an upgrade handler does).
    public static func accept() -> BLIPUpgradeDecision {
        .accept(identity: nil, headers: [:])
    }

    /// Upgrade, with `identity` for the connection's handlers.
    public static func accept(identity: (any Sendable)?) -> BLIPUpgradeDecision {
        .accept(identity: identity, headers: [:])
    }

    /// 401 with a `WWW-Authenticate: Basic` challenge for `realm` (RFC 7617).
    public static func unauthorized(realm: String, body: String = "authentication required") -> BLIPUpgradeDecision {
        let escaped = realm.replacing("\\", with: "\\\\").replacing("\"", with: "\\\"")
        return .refuse(status: 401, headers: [.wwwAuthenticate: "Basic realm=\"\(escaped)\""], body: body)
    }

    /// 403: the client is known but may not reach this endpoint.
    public static func forbidden(_ body: String = "forbidden") -> BLIPUpgradeDecision {
        .refuse(status: 403, headers: [:], body: body)
    }

    /// 404: nothing to reach here (say, no such database).
    public static func notFound(_ body: String = "not found") -> BLIPUpgradeDecision {
        .refuse(status: 404, headers: [:], body: body)
    }
}

extension BLIPWebSocketServer {
    /// Decides each WebSocket upgrade the server would otherwise accept (after its path and subprotocol
    /// checks). It runs in a task of its own, may suspend (to look up a password or a session) and may
    /// throw: the client then gets a 500 with a generic body, and the error is logged, never sent. The
    /// server's ``Configuration/handshakeTimeout`` still runs meanwhile: when it fires, the connection
    /// closes and the handler's task is cancelled.
    public typealias UpgradeHandler = @Sendable (BLIPUpgradeRequest) async throws -> BLIPUpgradeDecision
}
