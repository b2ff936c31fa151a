#if canImport(Glibc)
    import Glibc
#elseif canImport(Musl)
    import Musl
#elseif canImport(Darwin)
    import Darwin
#endif

/// A loopback port held for one test: a socket bound to it with `SO_REUSEADDR`, never listening.
///
/// While it is held, connecting to the port is refused and the kernel never hands the port to another
/// `bind(port: 0)`, but a server with `SO_REUSEADDR` (every BLIP server, the `blip` tool) can still bind and listen
/// on it, as often as a test restarts one there. A port found free and released instead could be taken meanwhile by
/// a server another suite starts: it was, and a reconnecting session of one test reached another test's server.
public final class LoopbackPortReservation: Sendable {
    public let port: Int
    private let descriptor: Int32

    public init() throws {
        #if canImport(Darwin)
            let descriptor = socket(AF_INET, SOCK_STREAM, 0)
        #else
            let descriptor = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        #endif
        guard descriptor >= 0 else { throw ReservationError(step: "socket", errno: errno) }
        var on: Int32 = 1
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let reusable = setsockopt(descriptor, SOL_SOCKET, SO_REUSEADDR, &on, socklen_t(MemoryLayout<Int32>.size)) == 0
        let bound =
            reusable
            && withUnsafeMutablePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) {
                    bind(descriptor, $0, length) == 0 && getsockname(descriptor, $0, &length) == 0
                }
            }
        guard bound else {
            let failure = ReservationError(step: reusable ? "bind" : "setsockopt", errno: errno)
            close(descriptor)
            throw failure
        }
        self.descriptor = descriptor
        self.port = Int(UInt16(bigEndian: address.sin_port))
    }

    deinit { close(self.descriptor) }

    struct ReservationError: Error, CustomStringConvertible {
        var step: String
        var errno: Int32
        var description: String { "reserving a loopback port: \(self.step) failed, errno \(self.errno)" }
    }
}
