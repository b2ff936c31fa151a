public import BLIP
public import BLIPWebSocket
internal import Foundation
internal import HTTPTypes
public import Hummingbird
internal import Logging
internal import NIOCore

extension RouterMethods where Context: BLIPUpgradeRequestContext {
    /// Mounts a BLIP endpoint on `path` (a Hummingbird path such as `/{db}/_blipsync`): WebSocket upgrades
    /// that reach it through this router's middleware become BLIP connections served by `router`.
    ///
    /// The subprotocol is negotiated as by the standalone server: the client's first offer among
    /// ``BLIPEndpointConfiguration/subprotocols`` wins, and a client offering none of them gets HTTP 500
    /// naming them. Then `shouldUpgrade` decides, with the request and its context as the middleware left
    /// them: `.accept(identity:headers:)` makes its identity the connection's (what every BLIP handler sees
    /// as `BLIPRequestContext.identity`), `.refuse` answers with its status. A middleware that throws an
    /// `HTTPError` (a 401 from an authenticator) answers the client as on any Hummingbird route.
    ///
    /// Upgrades happen only on a server built with
    /// ``HummingbirdCore/HTTPServerBuilder/http1BLIPUpgrade(blipRouter:configuration:)``; a request without
    /// `Upgrade: websocket` gets 426. `onConnection` is the application's scope for each connection: it runs
    /// in a task of the connection's own, beside its handlers, from the upgrade until the connection closes
    /// (which cancels it), for what the server does on its own initiative (a feed it pushes, requests of
    /// its own). Throwing while the connection is open closes it with 1011 and logs the error.
    @discardableResult
    public func blip(
        _ path: RouterPath,
        router: BLIPRouter,
        configuration: BLIPEndpointConfiguration = BLIPEndpointConfiguration(),
        shouldUpgrade: @escaping @Sendable (Request, Context) async throws -> BLIPUpgradeDecision = { _, _ in
            .accept()
        },
        onConnection: (@Sendable (BLIPConnection) async throws -> Void)? = nil
    ) -> Self {
        let origins = OriginRule(allowedOrigins: configuration.allowedOrigins)
        return self.on(path, method: .get) { request, context -> Response in
            guard HandshakeRules.isWebSocketUpgrade(request.headers[values: .upgrade]) else {
                return Response.text(
                    status: .upgradeRequired,
                    HandshakeRules.notAnUpgradeText,
                    headers: [.secWebSocketVersion: "13"]
                )
            }
            guard request.headers[values: .secWebSocketKey].count == 1 else {
                return Response.text(status: .badRequest, HandshakeRules.missingKeyText)
            }
            guard origins.allows(origin: request.headers[.origin], host: request.head.authority) else {
                return Response.text(status: .forbidden, "pages from this origin may not connect\n")
            }
            let offered = BLIPSubprotocol.parseOffers(request.headers[values: .secWebSocketProtocol])
            let negotiated = HandshakeRules.negotiate(
                offered: offered,
                supported: configuration.subprotocols,
                acceptsSeedDialect: configuration.acceptsSeedDialect
            )
            guard let (subprotocol, dialect) = negotiated else {
                let refusal = HandshakeRules.subprotocolRefusalText(supported: configuration.subprotocols)
                return Response.text(status: .internalServerError, refusal + "\n")
            }
            switch try await shouldUpgrade(request, context) {
            case .accept(let identity, let extra):
                if let problem = UpgradedServerChannel.problem(acceptHeaders: extra) {
                    context.logger.error(
                        "the upgrade decision's accept is invalid; answered 500",
                        metadata: ["blip.problem": "\(problem)"]
                    )
                    return Response.text(status: .internalServerError, "internal server error\n")
                }
                context.blipUpgrade.value = AcceptedUpgrade(
                    dialect: dialect,
                    subprotocol: subprotocol,
                    identity: identity,
                    pathParameters: Self.pathParameters(context.parameters),
                    router: router,
                    configuration: configuration,
                    onConnection: onConnection
                )
                return Response(status: .switchingProtocols, headers: extra)
            case .refuse(let status, let headers, let body):
                if let problem = UpgradedServerChannel.problem(refusalStatus: status, headers: headers, body: body) {
                    context.logger.error(
                        "the upgrade decision's refusal is invalid; answered 500",
                        metadata: ["blip.problem": "\(problem)"]
                    )
                    return Response.text(status: .internalServerError, "internal server error\n")
                }
                var fields = headers
                if fields[.contentType] == nil { fields[.contentType] = "text/plain; charset=utf-8" }
                return Response(
                    status: HTTPResponse.Status(code: status),
                    headers: fields,
                    body: ResponseBody(byteBuffer: ByteBuffer(string: body))
                )
            }
        }
    }

    /// Hummingbird's captures, percent-decoded as the standalone server's are.
    private static func pathParameters(_ parameters: Parameters) -> [String: String] {
        var decoded: [String: String] = [:]
        for (name, value) in parameters {
            decoded[String(name)] = String(value).removingPercentEncoding ?? String(value)
        }
        return decoded
    }
}

extension Response {
    static func text(status: HTTPResponse.Status, _ text: String, headers: HTTPFields = [:]) -> Response {
        var fields = headers
        fields[.contentType] = "text/plain; charset=utf-8"
        return Response(status: status, headers: fields, body: ResponseBody(byteBuffer: ByteBuffer(string: text)))
    }
}
