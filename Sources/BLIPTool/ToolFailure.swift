internal import BLIP
internal import BLIPWebSocket
internal import Foundation
internal import NIOCore
internal import NIOPosix

/// How the tool reports what went wrong: one line on standard error, `blip: ` and then what failed, where
/// (the endpoint, the file, the port) and why in plain words. A usage error (a flag or value the command does
/// not take) exits with 64, a failure at run time with 1. With `--json`, a failure at run time is a JSON
/// object on standard output instead, as the command's other output is.
enum ToolFailure {
    /// The line for a failure at run time (without the prefix).
    static func describe(_ error: any Error) -> String {
        switch error {
        case let error as BLIPConnectionError:
            return error.message
        case let error as BLIPHandshakeError:
            let refusal =
                "the server refused the WebSocket handshake: HTTP \(error.status) \(error.reason) from \(error.url)"
            return error.detail.map { "\(refusal): \($0)" } ?? refusal
        case let error as ToolError:
            return error.message
        default:
            return "\(error)"
        }
    }

    /// Whether `error` is the socket's own refusal to bind or listen (an address in use, one that is not
    /// this machine's, a name that does not resolve), not a failure before it (a TLS key that cannot be read).
    static func isListenFailure(_ error: any Error) -> Bool {
        error is IOError || error is SocketAddressError || error is NIOConnectionError
    }

    /// Listening on `host:port` failed: names the address, and says why in plain words.
    static func cannotListen(on host: String, port: Int, _ error: any Error) -> ToolError {
        ToolError("cannot listen on \(host):\(port): \(SocketFailureText.describe(error))")
    }
}

/// A failure the tool describes itself, in a line a person reads.
struct ToolError: Error, CustomStringConvertible {
    let message: String

    init(_ message: String) {
        self.message = message
    }

    var description: String { self.message }
}
