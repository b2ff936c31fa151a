internal import BLIP
internal import NIOSSL

/// Why a TLS handshake failed, in plain words for a person ("the server's certificate is not trusted"):
/// NIOSSL's own text is BoringSSL's error queue (`handshakeFailed(sslError([Error: 268435703
/// error:100000f7:SSL routines:OPENSSL_internal:WRONG_VERSION_NUMBER at ...]))`). BoringSSL's reason names
/// are the stable part of that text, so they are what is matched; anything unknown keeps NIOSSL's text.
package enum TLSFailureText {
    /// The error for a TLS failure on the way to `url`. A connection the server closed is
    /// `transportFailed` (transient: a server at its limit or restarting does that); a certificate, a
    /// version or a cipher the two sides cannot agree on is `tlsFailed` (the same attempt fails again).
    static func failure(_ error: any Error, url: BLIPWebSocketURL) -> BLIPConnectionError {
        if let closed = Self.closedByServer(error) {
            return BLIPConnectionError(
                .transportFailed,
                "the connection to \(url) closed: \(closed)",
                underlying: error
            )
        }
        return BLIPConnectionError(.tlsFailed, "TLS with \(url) failed: \(Self.describe(error))", underlying: error)
    }

    /// Whether `error` is one of NIOSSL's: the ones ``failure(_:url:)`` describes.
    static func isTLS(_ error: any Error) -> Bool {
        error is NIOSSLError || error is BoringSSLError || error is NIOSSLExtraError
    }

    /// The server closed the TCP connection: during the TLS handshake (NIOSSL's synthetic "EOF during
    /// handshake"), or after it without a TLS close, before the WebSocket handshake finished.
    private static func closedByServer(_ error: any Error) -> String? {
        if let error = error as? NIOSSLError, case .uncleanShutdown = error {
            return "the server closed it after the TLS handshake, before the WebSocket handshake finished"
        }
        if "\(error)".contains("EOF during handshake") { return "the server closed it during the TLS handshake" }
        return nil
    }

    package static func describe(_ error: any Error) -> String {
        if let error = error as? NIOSSLExtraError, error == .failedToValidateHostname {
            return "the server's certificate is not for this host name"
        }
        let text = "\(error)"
        for (reasons, meaning) in Self.meanings where reasons.contains(where: { text.contains($0) }) {
            return meaning
        }
        return text
    }

    /// BoringSSL reason names, and what each means to someone connecting.
    private static let meanings: [([String], String)] = [
        (
            ["WRONG_VERSION_NUMBER", "PACKET_LENGTH_TOO_LONG", "HTTP_REQUEST", "RECORD_TOO_LARGE"],
            "the server did not answer in TLS (is it a ws:// endpoint?)"
        ),
        (
            ["CERTIFICATE_VERIFY_FAILED"],
            "the server's certificate is not trusted (no trusted root signed it, it has expired, or it does not match a pin)"
        ),
        (["CERTIFICATE_REQUIRED"], "the server requires a client certificate"),
        (
            ["ALERT_BAD_CERTIFICATE", "ALERT_UNKNOWN_CA", "ALERT_CERTIFICATE_UNKNOWN", "ALERT_ACCESS_DENIED"],
            "the server did not accept the client certificate"
        ),
        (["ALERT_CERTIFICATE_EXPIRED"], "the server says the client certificate has expired"),
        (["PROTOCOL_VERSION", "UNSUPPORTED_PROTOCOL"], "the server and this client support no common TLS version"),
        (["NO_SHARED_CIPHER", "HANDSHAKE_FAILURE"], "the server and this client support no common cipher"),
    ]
}
