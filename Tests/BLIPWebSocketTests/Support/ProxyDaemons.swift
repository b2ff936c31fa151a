import Foundation

/// A real HTTP proxy for the tests: tinyproxy (Debian package) on a loopback port, with its own
/// configuration file.
struct TinyProxy: Sendable {
    static let executable = "/usr/bin/tinyproxy"
    static var isAvailable: Bool { FileManager.default.isExecutableFile(atPath: Self.executable) }

    let daemon: LoopbackDaemon
    var port: Int { self.daemon.port }

    /// - Parameters:
    ///   - credentials: the user and password it requires (`BasicAuth`), if any.
    ///   - connectPorts: the only ports it opens tunnels to (`ConnectPort`); others get 403.
    static func with<T: Sendable>(
        credentials: (String, String)? = nil,
        connectPorts: [Int],
        _ body: (TinyProxy) async throws -> T
    ) async throws -> T {
        let credentials = credentials.map { [$0.0, $0.1] }
        let start = {
            let daemon = try await LoopbackDaemon.start(Self.executable) { port, directory in
                var lines = [
                    "Port \(port)", "Listen 127.0.0.1", "Timeout 60", "MaxClients 64", "Allow 127.0.0.1",
                    "LogLevel Connect", "Syslog Off", "LogFile \"\(directory.appendingPathComponent("log").path)\"",
                ]
                if getuid() == 0 { lines += ["User nobody", "Group nogroup"] }
                lines += connectPorts.map { "ConnectPort \($0)" }
                if let credentials { lines.append("BasicAuth \(credentials[0]) \(credentials[1])") }
                let configuration = directory.appendingPathComponent("tinyproxy.conf")
                try (lines.joined(separator: "\n") + "\n").write(to: configuration, atomically: true, encoding: .utf8)
                return ["-d", "-c", configuration.path]
            }
            return TinyProxy(daemon: daemon)
        }
        return try await LoopbackDaemon.with(start, stop: { await $0.daemon.stop() }, body)
    }

    /// How many tunnels it has opened so far (from its log).
    var tunnelsOpened: Int {
        let log = (try? String(contentsOf: self.daemon.directory.appendingPathComponent("log"), encoding: .utf8)) ?? ""
        return log.components(separatedBy: "Established connection").count - 1
    }

    /// `http://[user:password@]127.0.0.1:port`
    func url(user: String? = nil, password: String? = nil) -> String {
        let credentials = user.map { "\($0):\(password ?? "")@" } ?? ""
        return "http://\(credentials)127.0.0.1:\(self.port)"
    }
}

/// A real SOCKS5 proxy for the tests: microsocks (Debian package) on a loopback port.
struct MicroSocks: Sendable {
    static let executable = "/usr/bin/microsocks"
    static var isAvailable: Bool { FileManager.default.isExecutableFile(atPath: Self.executable) }

    let daemon: LoopbackDaemon
    var port: Int { self.daemon.port }

    /// - Parameter credentials: the user and password it requires (RFC 1929), if any.
    static func with<T: Sendable>(
        credentials: (String, String)? = nil,
        _ body: (MicroSocks) async throws -> T
    ) async throws -> T {
        let credentials = credentials.map { ["-u", $0.0, "-P", $0.1] } ?? []
        let start = {
            let daemon = try await LoopbackDaemon.start(Self.executable) { port, _ in
                ["-i", "127.0.0.1", "-p", "\(port)"] + credentials
            }
            return MicroSocks(daemon: daemon)
        }
        return try await LoopbackDaemon.with(start, stop: { await $0.daemon.stop() }, body)
    }

    /// `socks5://[user:password@]127.0.0.1:port`
    func url(user: String? = nil, password: String? = nil) -> String {
        let credentials = user.map { "\($0):\(password ?? "")@" } ?? ""
        return "socks5://\(credentials)127.0.0.1:\(self.port)"
    }
}
