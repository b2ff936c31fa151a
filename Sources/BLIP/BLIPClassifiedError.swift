/// An error that says whether trying again, unchanged, may succeed: the one classification every error of
/// this package shares, so that a retry policy (`BLIPWebSocket`'s reconnecting session among them) asks
/// one question of whatever it caught.
public protocol BLIPClassifiedError: Error {
    /// Whether trying again later, with nothing changed, may succeed: a network that failed, a server
    /// restarting or busy. False when the same attempt would fail again (credentials refused, a protocol
    /// error, a certificate not trusted) until something is changed.
    var isTransient: Bool { get }
}

extension BLIPConnectionError: BLIPClassifiedError {
    /// How the connection ended, when it did (``closeStatus``); else by ``code``: a network failure, a
    /// missed heartbeat, a timeout or a shutdown are transient; a protocol violation, a message too large or
    /// refused, a limit exceeded, a TLS failure (a certificate not trusted) and a subprotocol no server
    /// speaks are not.
    public var isTransient: Bool {
        if let status = self.closeStatus, self.code == .connectionClosed || status.underlying == nil {
            return status.isTransient
        }
        switch self.code {
        case .transportFailed, .heartbeatTimedOut, .timedOut, .shutDown, .connectionClosed: return true
        case .handshakeFailed: return true
        default: return false
        }
    }
}

extension BLIPError: BLIPClassifiedError {
    /// ERR replies that say "later": BLIP/503 (the connection was too busy) and, in any domain, the HTTP
    /// statuses 408, 429, 502, 503 and 504.
    public var isTransient: Bool {
        [408, 429, 502, 503, 504].contains(self.code.rawValue)
    }
}
