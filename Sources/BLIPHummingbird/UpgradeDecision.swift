internal import BLIP
internal import BLIPWebSocket
internal import HTTPTypes
internal import Hummingbird
internal import HummingbirdCore
internal import Logging
internal import NIOCore
internal import NIOHTTP1
internal import NIOHTTPTypesHTTP1

/// The BLIP router's answer to one upgrade request: upgrade (the 101's headers, what the route accepted,
/// the request as BLIP handlers see it), or the response to send instead.
enum UpgradeDecision: Sendable {
    case upgrade(HTTPHeaders, AcceptedUpgrade, BLIPUpgradeRequest)
    case refuse(CollectedResponse)

    /// What the BLIP upgrade request records of the client, read from the channel on its event loop.
    struct Peer: Sendable {
        var remoteAddress: String?
        var certificateChain: [[UInt8]]

        init(_ channel: any Channel) {
            self.remoteAddress = UpgradedServerChannel.describe(channel.remoteAddress)
            self.certificateChain = UpgradedServerChannel.peerCertificateChain(channel)
        }
    }

    /// Runs `responder` (routes and middleware) on the upgrade request, as Hummingbird would run it on any
    /// request: a thrown `HTTPResponseError` becomes its response, any other error a 500.
    static func make<Responder: HTTPResponder>(
        head: HTTPRequestHead,
        channel: any Channel,
        peer: Peer,
        logger: Logger,
        responder: Responder
    ) async -> UpgradeDecision where Responder.Context: BLIPUpgradeRequestContext {
        let request: Request
        do {
            let converted = try HTTPRequest(head, secure: false, splitCookie: false)
            request = Request(head: converted, body: RequestBody(buffer: ByteBuffer()))
        } catch {
            return .refuse(CollectedResponse(status: .badRequest, text: "malformed request\n"))
        }
        let context = Responder.Context(source: ApplicationRequestContextSource(channel: channel, logger: logger))
        let response: Response
        do {
            response = try await responder.respond(to: request, context: context)
        } catch let error as any HTTPResponseError {
            do {
                response = try error.response(from: request, context: context)
            } catch {
                return .refuse(CollectedResponse.internalError)
            }
        } catch {
            logger.error(
                "the BLIP router threw on an upgrade request; answered 500",
                metadata: ["blip.error": "\(error)"]
            )
            return .refuse(CollectedResponse.internalError)
        }
        guard response.status == .switchingProtocols, let accepted = context.blipUpgrade.value else {
            return .refuse(await CollectedResponse.collect(response, logger: logger))
        }
        var headers = HTTPHeaders()
        if let subprotocol = accepted.subprotocol { headers.add(name: "Sec-WebSocket-Protocol", value: subprotocol) }
        for field in response.headers where !Self.isHandshakeField(field.name) {
            headers.add(name: field.name.rawName, value: field.value)
        }
        let upgradeRequest = BLIPUpgradeRequest(
            method: head.method.rawValue,
            uri: head.uri,
            headers: HTTPFields(head.headers.map { ($0.name, $0.value) }),
            remoteAddress: peer.remoteAddress,
            peerCertificateChain: peer.certificateChain,
            pathParameters: accepted.pathParameters,
            subprotocol: accepted.subprotocol
        )
        return .upgrade(headers, accepted, upgradeRequest)
    }

    /// Fields of a 101 that are the handshake's (or meaningless on it), whatever a middleware added.
    private static func isHandshakeField(_ name: HTTPField.Name) -> Bool {
        let lowercased = name.canonicalName
        return lowercased.hasPrefix("sec-websocket-")
            || ["upgrade", "connection", "content-length", "transfer-encoding", "content-type"].contains(lowercased)
    }
}
