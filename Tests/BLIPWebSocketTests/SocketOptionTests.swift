import BLIP
import BLIPInspection
import BLIPWebSocket
import Foundation
import NIOCore
import Testing

#if canImport(Glibc)
    import Glibc
#endif

/// The options set on every socket the library opens. TCP_NODELAY belongs to the TCP level: set at the socket
/// level, its number (1) is SO_DEBUG, which Linux allows only with CAP_NET_ADMIN, so that every connection
/// failed for a user who is not root (and as root, SO_DEBUG was switched on instead).
@Suite("Socket options of accepted and connected sockets", .timeLimit(.minutes(1)))
struct SocketOptionTests {
    /// The options read back from one open socket.
    struct Options: Equatable, CustomStringConvertible {
        var noDelay: Bool
        var debug: Bool
        var description: String { "TCP_NODELAY \(self.noDelay ? "on" : "off"), SO_DEBUG \(self.debug ? "on" : "off")" }
    }

    @Test("the server's accepted socket and the client's connected socket: TCP_NODELAY on, SO_DEBUG off")
    func serverAndClient() async throws {
        try await withServer { server in
            try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:\(server.port)/") { connection in
                _ = try await connection.sendRequest(BLIPRequest(profile: "echo"))
                let (accepted, connected) = try Self.sockets(serverPort: server.port)
                #expect(accepted == [Options(noDelay: true, debug: false)], "accepted: \(accepted)")
                #expect(connected == [Options(noDelay: true, debug: false)], "connected: \(connected)")
            }
        }
    }

    @Test("the inspecting proxy's accepted socket and its connection upstream: TCP_NODELAY on, SO_DEBUG off")
    func inspectingProxy() async throws {
        try await withServer { server in
            try await withProxy(upstream: "ws://127.0.0.1:\(server.port)") { proxy, _ in
                try await BLIPWebSocketClient.connect(to: "ws://127.0.0.1:\(proxy.port)/") { connection in
                    _ = try await connection.sendRequest(BLIPRequest(profile: "echo"))
                    // The proxy's side of the client's connection, and its own connection to the server.
                    let (acceptedByProxy, _) = try Self.sockets(serverPort: proxy.port)
                    let (_, connectedByProxy) = try Self.sockets(serverPort: server.port)
                    #expect(acceptedByProxy == [Options(noDelay: true, debug: false)], "\(acceptedByProxy)")
                    #expect(connectedByProxy == [Options(noDelay: true, debug: false)], "\(connectedByProxy)")
                }
            }
        }
    }

    /// The options of this process's TCP sockets on loopback whose local port is `serverPort` and which have
    /// a peer (accepted ones), and of those whose peer's port is `serverPort` (connected ones).
    static func sockets(serverPort: Int) throws -> (accepted: [Options], connected: [Options]) {
        var accepted: [Options] = []
        var connected: [Options] = []
        for entry in try FileManager.default.contentsOfDirectory(atPath: "/proc/self/fd") {
            guard let fd = Int32(entry),
                let target = try? FileManager.default.destinationOfSymbolicLink(atPath: "/proc/self/fd/\(entry)"),
                target.hasPrefix("socket:"),
                let local = Self.port(of: fd, getsockname), let peer = Self.port(of: fd, getpeername)
            else { continue }
            if local == serverPort { accepted.append(try Self.options(fd)) }
            if peer == serverPort { connected.append(try Self.options(fd)) }
        }
        return (accepted, connected)
    }

    private static func port(
        of fd: Int32,
        _ query: (Int32, UnsafeMutablePointer<sockaddr>, UnsafeMutablePointer<socklen_t>) -> Int32
    ) -> Int? {
        var address = sockaddr_in()
        var length = socklen_t(MemoryLayout<sockaddr_in>.size)
        let status = withUnsafeMutablePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { query(fd, $0, &length) }
        }
        guard status == 0, address.sin_family == sa_family_t(AF_INET) else { return nil }
        return Int(UInt16(bigEndian: address.sin_port))
    }

    private static func options(_ fd: Int32) throws -> Options {
        Options(
            noDelay: try Self.flag(fd, level: Int32(IPPROTO_TCP), name: TCP_NODELAY),
            debug: try Self.flag(fd, level: SOL_SOCKET, name: SO_DEBUG)
        )
    }

    private static func flag(_ fd: Int32, level: Int32, name: Int32) throws -> Bool {
        var value: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        guard getsockopt(fd, level, name, &value, &length) == 0 else {
            throw POSIXError(POSIXErrorCode(rawValue: errno) ?? .EINVAL)
        }
        return value != 0
    }
}
