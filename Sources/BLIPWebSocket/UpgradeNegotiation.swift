internal import Logging
internal import NIOCore
internal import NIOHTTP1
internal import NIOSSL

/// One connection's way through its WebSocket upgrade: the server's own checks, then the application's
/// ``BLIPWebSocketServer/UpgradeHandler``, whose answer the upgrader (101 and its headers, the identity) or
/// the ``RefusalHandler`` (status, headers, body) then acts on.
///
/// Lives on the channel's event loop. The handler runs in a task of its own; its answer comes back to the
/// loop before it touches anything. A connection closing first (the handshake timeout) cancels the task.
final class UpgradeNegotiation {
    struct Refusal {
        var status: HTTPResponseStatus
        var headers: HTTPHeaders
        var body: String

        static let internalError = Refusal(status: .internalServerError, headers: [:], body: "internal server error")
    }

    enum Outcome {
        /// `verdict` is the policy's `.accept` or `.raw`.
        case upgrade(verdict: UpgradePolicy.Decision, request: BLIPUpgradeRequest, identity: (any Sendable)?)
        case refuse(Refusal)
    }

    private let policy: UpgradePolicy
    private let handler: BLIPWebSocketServer.UpgradeHandler?
    private let logger: Logger
    /// Set once decided; nil while the handler runs, and for requests the policy refuses (the
    /// ``RefusalHandler`` asks the policy itself).
    private(set) var outcome: Outcome?
    private var pending: EventLoopPromise<HTTPHeaders?>?
    private var task: Task<Void, Never>?

    init(policy: UpgradePolicy, handler: BLIPWebSocketServer.UpgradeHandler?, logger: Logger) {
        self.policy = policy
        self.handler = handler
        self.logger = logger
    }

    /// For `NIOWebSocketServerUpgrader`'s `shouldUpgrade`: the extra headers of the 101, or nil to refuse.
    func shouldUpgrade(_ channel: any Channel, _ head: HTTPRequestHead) -> EventLoopFuture<HTTPHeaders?> {
        let loop = channel.eventLoop
        let verdict = self.policy.decide(head)
        let subprotocol: String?
        switch verdict {
        case .accept(let chosen, _), .raw(let chosen): subprotocol = chosen
        case .refuse: return loop.makeSucceededFuture(nil)
        }
        let request = BLIPUpgradeRequest(
            method: head.method.rawValue,
            uri: head.uri,
            headers: HTTPFields(head.headers.map { ($0.name, $0.value) }),
            remoteAddress: Self.describe(channel.remoteAddress),
            peerCertificateChain: Self.peerCertificateChain(channel),
            pathParameters: self.policy.pathParameters(head.uri) ?? [:],
            subprotocol: subprotocol
        )
        guard let handler = self.handler else {
            self.outcome = .upgrade(verdict: verdict, request: request, identity: nil)
            return loop.makeSucceededFuture(Self.handshakeHeaders(subprotocol))
        }
        let promise = loop.makePromise(of: HTTPHeaders?.self)
        self.pending = promise
        let negotiation = NIOLoopBound(self, eventLoop: loop)
        channel.closeFuture.whenComplete { _ in negotiation.value.connectionClosed() }
        self.task = Task {
            let result: Result<BLIPUpgradeDecision, any Error>
            do {
                result = .success(try await handler(request))
            } catch {
                result = .failure(error)
            }
            loop.execute { negotiation.value.decided(result, verdict: verdict, request: request) }
        }
        return promise.futureResult
    }

    private func decided(
        _ result: Result<BLIPUpgradeDecision, any Error>,
        verdict: UpgradePolicy.Decision,
        request: BLIPUpgradeRequest
    ) {
        guard let promise = self.pending else { return }  // closed meanwhile
        self.pending = nil
        self.task = nil
        var metadata: Logger.Metadata = [
            "blip.remote": "\(request.remoteAddress ?? "?")", "blip.path": "\(request.path)",
        ]
        switch result {
        case .failure(let error):
            metadata["blip.error"] = "\(error)"
            self.logger.error("the upgrade handler threw; answered 500", metadata: metadata)
            self.outcome = .refuse(.internalError)
        case .success(.accept(let identity, let extra)):
            if let problem = Self.problem(acceptHeaders: extra) {
                metadata["blip.problem"] = "\(problem)"
                self.logger.error("the upgrade handler's accept is invalid; answered 500", metadata: metadata)
                self.outcome = .refuse(.internalError)
            } else {
                self.outcome = .upgrade(verdict: verdict, request: request, identity: identity)
                var headers = Self.handshakeHeaders(verdict.subprotocol)
                for field in extra { headers.add(name: field.name.rawName, value: field.value) }
                promise.succeed(headers)
                return
            }
        case .success(.refuse(let status, let headers, let body)):
            if let problem = Self.problem(refusalStatus: status, headers: headers, body: body) {
                metadata["blip.problem"] = "\(problem)"
                self.logger.error("the upgrade handler's refusal is invalid; answered 500", metadata: metadata)
                self.outcome = .refuse(.internalError)
            } else {
                var fields = HTTPHeaders(headers.pairs)
                if !headers.contains("Content-Type") {
                    fields.add(name: "Content-Type", value: "text/plain; charset=utf-8")
                }
                self.outcome = .refuse(
                    Refusal(status: HTTPResponseStatus(statusCode: status), headers: fields, body: body)
                )
            }
        }
        promise.succeed(nil)  // the RefusalHandler answers with the outcome's refusal
    }

    /// Stops waiting for a handler that has not answered: its task is cancelled and the upgrade refused
    /// (on a closed channel, which writes nothing).
    private func connectionClosed() {
        self.task?.cancel()
        self.task = nil
        if let promise = self.pending {
            self.pending = nil
            promise.succeed(nil)
        }
    }

    private static func handshakeHeaders(_ subprotocol: String?) -> HTTPHeaders {
        var headers = HTTPHeaders()
        if let subprotocol { headers.add(name: "Sec-WebSocket-Protocol", value: subprotocol) }
        return headers
    }

    /// Why an accept's headers cannot be sent, or nil.
    static func problem(acceptHeaders headers: HTTPFields) -> String? {
        for field in headers {
            let name = field.name.canonicalName
            if name == "upgrade" || name == "connection" || name.hasPrefix("sec-websocket-") {
                return "\(field.name) is the handshake's own field"
            }
        }
        // No field can split the response (RFC 9110 5.5): `HTTPField` holds only token names, and values
        // without CR, LF or NUL (it makes them spaces).
        return nil
    }

    /// Why a refusal cannot be sent, or nil.
    static func problem(refusalStatus status: Int, headers: HTTPFields, body: String) -> String? {
        guard (300...599).contains(status) else { return "status \(status) is not 300 to 599" }
        guard body.utf8.count <= BLIPUpgradeDecision.maximumRefusalBodySize else {
            return "a body of \(body.utf8.count) bytes is over \(BLIPUpgradeDecision.maximumRefusalBodySize)"
        }
        for name in ["Content-Length", "Transfer-Encoding", "Connection"] where headers.contains(name) {
            return "\(name) is the server's to set"
        }
        // No field can split the response (RFC 9110 5.5): `HTTPField` holds only token names, and values
        // without CR, LF or NUL (it makes them spaces).
        return nil
    }

    /// `host:port`, `[host]:port` for IPv6.
    static func describe(_ address: SocketAddress?) -> String? {
        guard let address else { return nil }
        guard let host = address.ipAddress, let port = address.port else { return "\(address)" }
        return address.protocol == .inet6 ? "[\(host)]:\(port)" : "\(host):\(port)"
    }

    /// The client's certificates when TLS verified them (its whole chain), else its leaf certificate.
    static func peerCertificateChain(_ channel: any Channel) -> [[UInt8]] {
        guard let tls = try? channel.pipeline.syncOperations.handler(type: NIOSSLServerHandler.self) else {
            return []
        }
        if let chain = tls.peerValidatedCertificateChain {
            return chain.compactMap { try? $0.toDERBytes() }
        }
        return tls.peerCertificate.flatMap { try? $0.toDERBytes() }.map { [$0] } ?? []
    }
}

extension UpgradePolicy.Decision {
    var subprotocol: String? {
        switch self {
        case .accept(let subprotocol, _), .raw(let subprotocol): subprotocol
        case .refuse: nil
        }
    }
}
