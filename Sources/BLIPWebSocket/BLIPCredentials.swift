#if canImport(FoundationEssentials)
    internal import FoundationEssentials
#else
    internal import Foundation
#endif

/// What a client proves who it is with, sent with the WebSocket handshake
/// (``BLIPWebSocketClient/Configuration/credentials``): given as a value, so that a password never has to
/// be percent-encoded into a URL. Sent to the URL's origin only: a redirect to another origin drops them.
public struct BLIPCredentials: Sendable, Hashable, CustomStringConvertible, CustomReflectable {
    /// The header field they are sent in: its name and value.
    let headerName: String
    let headerValue: String

    /// HTTP Basic (RFC 7617): `Authorization: Basic base64(user:password)`, as Sync Gateway's users log in.
    /// The user name cannot contain a colon (the server splits at the first one); the password can.
    public static func basic(user: String, password: String) -> BLIPCredentials {
        BLIPCredentials(
            headerName: "Authorization",
            headerValue: "Basic " + Data("\(user):\(password)".utf8).base64EncodedString()
        )
    }

    /// A bearer token (RFC 6750): `Authorization: Bearer <token>`, e.g. an OpenID Connect ID token.
    public static func bearer(_ token: String) -> BLIPCredentials {
        BLIPCredentials(headerName: "Authorization", headerValue: "Bearer " + token)
    }

    /// A session cookie: `Cookie: <name>=<value>`; Sync Gateway's is `SyncGatewaySession`.
    public static func cookie(name: String, value: String) -> BLIPCredentials {
        BLIPCredentials(headerName: "Cookie", headerValue: "\(name)=\(value)")
    }

    /// Which kind they are, never the secret.
    public var description: String {
        if self.headerName == "Cookie" {
            return "BLIPCredentials(cookie \(self.headerValue.prefix { $0 != "=" }))"
        }
        return "BLIPCredentials(\(self.headerValue.prefix { $0 != " " }))"
    }

    /// `dump` and debuggers see the kind only, as ``description`` does.
    public var customMirror: Mirror { Mirror(self, children: ["kind": self.description]) }
}
