internal import NIOSSL

/// Why a TLS handshake failed, in plain words for a person ("the server's certificate is not trusted"):
/// NIOSSL's own text is BoringSSL's error queue (`handshakeFailed(sslError([Error: 268435703
/// error:100000f7:SSL routines:OPENSSL_internal:WRONG_VERSION_NUMBER at ...]))`). BoringSSL's reason names
/// are the stable part of that text, so they are what is matched; anything unknown keeps NIOSSL's text.
package enum TLSFailureText {
    package static func describe(_ error: any Error) -> String {
        if let error = error as? NIOSSLExtraError, error == .failedToValidateHostname {
            return "the server's certificate is not for this host name"
        }
        if let error = error as? NIOSSLError, case .uncleanShutdown = error {
            return "the server closed the connection during the TLS handshake"
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
