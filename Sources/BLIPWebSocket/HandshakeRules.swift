package import BLIPWire

/// The server side's handshake rules, shared by ``BLIPWebSocketServer`` and the integrations that mount
/// BLIP on another HTTP server (BLIPHummingbird), so that a client sees the same answers from both.
package enum HandshakeRules {
    /// The body of the 426 for a plain HTTP request to a BLIP endpoint.
    package static let notAnUpgradeText = "this is a BLIP WebSocket endpoint\n"
    /// The body of the 400 for an upgrade request without exactly one key (RFC 6455 4.2.1: a malformed
    /// handshake, not a request for another protocol).
    package static let missingKeyText = "a WebSocket upgrade request needs one Sec-WebSocket-Key header\n"

    /// Whether the `Upgrade` header values ask for WebSocket.
    package static func isWebSocketUpgrade(_ upgradeValues: [String]) -> Bool {
        upgradeValues.contains { $0.lowercased().contains("websocket") }
    }

    /// The subprotocol and dialect for a client's offers: no offer is the seed dialect when accepted,
    /// otherwise the client's first offer that is spoken (its preference wins, as in go-blip); nil when
    /// none is.
    package static func negotiate(
        offered: [String],
        supported: [String],
        acceptsSeedDialect: Bool
    ) -> (subprotocol: String?, dialect: BLIPDialect)? {
        if offered.isEmpty && acceptsSeedDialect { return (nil, .seed) }
        guard let chosen = BLIPSubprotocol.choose(offered: offered, supported: supported),
            let dialect = BLIPSubprotocol.dialect(for: chosen)
        else { return nil }
        return (chosen, dialect)
    }

    /// go-blip's refusal when no offer is spoken (sent with HTTP 500, followed by a newline), which clients
    /// recognise by its start.
    package static func subprotocolRefusalText(supported: [String]) -> String {
        "I only speak \(supported.joined(separator: ", ")) protocols"
    }
}
