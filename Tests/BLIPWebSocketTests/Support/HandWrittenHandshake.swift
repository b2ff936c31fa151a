import Crypto
import Foundation

/// The server half of an RFC 6455 opening handshake, written by hand for the test peers that must
/// control every byte on the wire after it.
enum HandWrittenHandshake {
    /// Once `bytes` starts with a whole HTTP request, removes it and returns the 101 response that accepts
    /// it (naming `subprotocol` if given); nil while the request is still incomplete.
    static func response(consuming bytes: inout [UInt8], subprotocol: String? = nil) -> String? {
        guard let end = bytes.firstRange(of: Array("\r\n\r\n".utf8)) else { return nil }
        let request = String(decoding: bytes[..<end.lowerBound], as: UTF8.self)
        bytes.removeSubrange(..<end.upperBound)
        let key =
            request.split(separator: "\r\n")
            .first { $0.lowercased().hasPrefix("sec-websocket-key:") }
            .map { $0.dropFirst("sec-websocket-key:".count).trimmingCharacters(in: .whitespaces) } ?? ""
        let accept = Data(Insecure.SHA1.hash(data: Data((key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11").utf8)))
            .base64EncodedString()
        var response =
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            + "Sec-WebSocket-Accept: \(accept)\r\n"
        if let subprotocol { response += "Sec-WebSocket-Protocol: \(subprotocol)\r\n" }
        return response + "\r\n"
    }
}
