import Foundation
import NIOCore
import NIOPosix

/// A real HTTP proxy for the tests: tinyproxy (Debian package, installed by .ci/setup.sh) in the foreground on
/// a loopback port, with its own configuration file, stopped when the test is done.
/// `@unchecked`: the process is started in `start` and only terminated and waited for after.
final class TinyProxy: @unchecked Sendable {
    static let executable = "/usr/bin/tinyproxy"
    static var isAvailable: Bool { FileManager.default.isExecutableFile(atPath: Self.executable) }

    let port: Int
    private let process: Process
    private let directory: URL

    /// - Parameters:
    ///   - credentials: the user and password it requires (`BasicAuth`), if any.
    ///   - connectPorts: the only ports it opens tunnels to (`ConnectPort`); others get 403.
    private init(port: Int, process: Process, directory: URL) {
        self.port = port
        self.process = process
        self.directory = directory
    }

    static func start(credentials: (String, String)? = nil, connectPorts: [Int]) async throws -> TinyProxy {
        try await offThePool {
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("blip-proxy-\(UUID())")
            // Writable by the user tinyproxy drops to, for its log.
            try FileManager.default.createDirectory(
                at: directory,
                withIntermediateDirectories: true,
                attributes: [.posixPermissions: 0o777]
            )
            let port = try freeLoopbackPort()
            var lines = [
                "Port \(port)", "Listen 127.0.0.1", "Timeout 60", "MaxClients 64", "Allow 127.0.0.1",
                "LogLevel Connect", "Syslog Off", "LogFile \"\(directory.appendingPathComponent("log").path)\"",
            ]
            if getuid() == 0 { lines += ["User nobody", "Group nogroup"] }
            lines += connectPorts.map { "ConnectPort \($0)" }
            if let (user, password) = credentials { lines.append("BasicAuth \(user) \(password)") }
            let configuration = directory.appendingPathComponent("tinyproxy.conf")
            try (lines.joined(separator: "\n") + "\n").write(to: configuration, atomically: true, encoding: .utf8)
            let process = Process()
            process.executableURL = URL(fileURLWithPath: Self.executable)
            process.arguments = ["-d", "-c", configuration.path]
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            let proxy = TinyProxy(port: port, process: process, directory: directory)
            // Ready once it accepts connections (bounded: 10 s).
            for _ in 0..<200 {
                if canConnect(port: port) { return proxy }
                guard process.isRunning else { break }
                usleep(50_000)
            }
            proxy.stopNow()
            throw ProxyTestError("tinyproxy did not start listening on port \(port)")
        }
    }

    /// Kills it (SIGKILL: on SIGTERM tinyproxy waits for open tunnels to time out) and waits for it off the
    /// cooperative pool.
    func stop() async {
        _ = try? await offThePool { self.stopNow() }
    }

    private func stopNow() {
        if self.process.isRunning {
            kill(self.process.processIdentifier, SIGKILL)
            self.process.waitUntilExit()
        }
        try? FileManager.default.removeItem(at: self.directory)
    }

    /// Runs `body` with a proxy started for it, stopped after it whatever happens.
    static func with<T: Sendable>(
        credentials: (String, String)? = nil,
        connectPorts: [Int],
        _ body: (TinyProxy) async throws -> T
    ) async throws -> T {
        let proxy = try await Self.start(credentials: credentials, connectPorts: connectPorts)
        do {
            let result = try await body(proxy)
            await proxy.stop()
            return result
        } catch {
            await proxy.stop()
            throw error
        }
    }

    /// How many tunnels it has opened so far (from its log).
    var tunnelsOpened: Int {
        let log = (try? String(contentsOf: self.directory.appendingPathComponent("log"), encoding: .utf8)) ?? ""
        return log.components(separatedBy: "Established connection").count - 1
    }

    /// `http://[user:password@]127.0.0.1:port`
    func url(user: String? = nil, password: String? = nil) -> String {
        let credentials = user.map { "\($0):\(password ?? "")@" } ?? ""
        return "http://\(credentials)127.0.0.1:\(self.port)"
    }
}

struct ProxyTestError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// A loopback port nothing listens on right now (bound, read, released).
func freeLoopbackPort() throws -> Int {
    let socket = try ServerBootstrap(group: MultiThreadedEventLoopGroup.singleton)
        .bind(host: "127.0.0.1", port: 0).wait()
    defer { try? socket.close().wait() }
    guard let port = socket.localAddress?.port else { throw ProxyTestError("no local port") }
    return port
}

private func canConnect(port: Int) -> Bool {
    guard
        let channel = try? ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: "127.0.0.1", port: port).wait()
    else { return false }
    try? channel.close().wait()
    return true
}
