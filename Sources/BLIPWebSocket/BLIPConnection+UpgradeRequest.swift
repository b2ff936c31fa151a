public import BLIP

extension BLIPConnection {
    /// For a connection a ``BLIPWebSocketServer`` accepted, the request it was upgraded from (its headers,
    /// path parameters, client certificate), so that handlers can read what the upgrade handler saw; nil
    /// for other connections.
    public var upgradeRequest: BLIPUpgradeRequest? {
        (self.transport as? BLIPWebSocketTransport)?.upgradeRequest
    }
}

extension BLIPRequestContext {
    /// The connection's ``BLIPConnection/upgradeRequest``.
    public var upgradeRequest: BLIPUpgradeRequest? { self.connection.upgradeRequest }
}
