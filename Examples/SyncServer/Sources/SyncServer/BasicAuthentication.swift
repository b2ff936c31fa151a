import Foundation
import HTTPTypes
import Hummingbird

/// The accounts the server knows: `name:password` pairs separated by commas.
struct Users: Sendable {
    private let passwords: [String: String]

    init(_ list: String) {
        var passwords: [String: String] = [:]
        for pair in list.split(separator: ",") {
            let parts = pair.split(separator: ":", maxSplits: 1)
            if parts.count == 2 { passwords[String(parts[0])] = String(parts[1]) }
        }
        self.passwords = passwords
    }

    func check(_ user: String, _ password: String) -> Bool {
        self.passwords[user] == password
    }
}

/// HTTP Basic authentication (RFC 7617) as an ordinary Hummingbird middleware: a request without valid
/// credentials gets 401 with a challenge, on the BLIP endpoint as on any route.
struct BasicAuthentication: RouterMiddleware {
    typealias Context = SyncRequestContext
    let users: Users

    func handle(
        _ request: Request,
        context: SyncRequestContext,
        next: (Request, SyncRequestContext) async throws -> Response
    ) async throws -> Response {
        guard let header = request.headers[.authorization], header.hasPrefix("Basic "),
            let decoded = Data(base64Encoded: String(header.dropFirst(6))),
            let credentials = String(data: decoded, encoding: .utf8),
            let colon = credentials.firstIndex(of: ":"),
            self.users.check(String(credentials[..<colon]), String(credentials[credentials.index(after: colon)...]))
        else {
            throw HTTPError(
                .unauthorized,
                headers: [.wwwAuthenticate: "Basic realm=\"sync\""],
                message: "login required"
            )
        }
        var context = context
        context.user = String(credentials[..<colon])
        return try await next(request, context)
    }
}
