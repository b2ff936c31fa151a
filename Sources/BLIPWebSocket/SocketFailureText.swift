internal import NIOCore
internal import NIOPosix

#if canImport(Glibc)
    internal import Glibc
#elseif canImport(Musl)
    internal import Musl
#elseif canImport(Darwin)
    internal import Darwin
#endif

/// Why a TCP connect or bind failed, in plain words ("connection refused"), for messages a person reads:
/// NIO's own text names the system call and the errno ("connection reset (error set): Connection refused)
/// (errno: 111)").
package enum SocketFailureText {
    package static func describe(_ error: any Error) -> String {
        switch error {
        case let error as IOError:
            return self.describe(errno: error.errnoCode)
        case let error as NIOConnectionError:
            if let first = error.connectionErrors.first { return self.describe(first.error) }
            if let lookup = error.dnsAError ?? error.dnsAAAAError {
                return "the name \(error.host) did not resolve (\(lookup))"
            }
            return "the name \(error.host) has no address"
        case ChannelError.connectTimeout(let amount):
            return "no answer within \(Double(amount.nanoseconds) / 1e9) s"
        default:
            return "\(error)"
        }
    }

    /// The C library's text for `code`, starting in lower case ("connection refused").
    package static func describe(errno code: Int32) -> String {
        guard let text = strerror(code).map({ String(cString: $0) }), !text.isEmpty else { return "errno \(code)" }
        return text.prefix(1).lowercased() + text.dropFirst()
    }
}
