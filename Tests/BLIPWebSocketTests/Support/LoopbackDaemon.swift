import BLIPTestSupport
import Foundation
import NIOCore
import NIOPosix

/// A server program from Debian's packages (installed by .ci/setup.sh), run in the foreground for a test on
/// a loopback port held for it (``LoopbackPortReservation``: tinyproxy and microsocks bind with `SO_REUSEADDR`) with
/// a scratch folder of its own, killed and waited for off the cooperative pool.
/// `@unchecked`: the process is started in `start` and only killed and waited for after.
final class LoopbackDaemon: @unchecked Sendable {
    let port: Int
    let directory: URL
    private let process: Process
    private let reservation: LoopbackPortReservation

    private init(reservation: LoopbackPortReservation, directory: URL, process: Process) {
        self.port = reservation.port
        self.reservation = reservation
        self.directory = directory
        self.process = process
    }

    /// Starts `executable` with the arguments `arguments` makes for the port and folder, and returns once it
    /// accepts connections (within 10 s).
    static func start(
        _ executable: String,
        arguments: @escaping @Sendable (_ port: Int, _ directory: URL) throws -> [String]
    ) async throws -> LoopbackDaemon {
        try await offThePool {
            let name = URL(fileURLWithPath: executable).lastPathComponent
            let directory = FileManager.default.temporaryDirectory.appendingPathComponent("blip-\(name)-\(UUID())")
            // Writable by a user the program may drop to, for its log.
            try FileManager.default.createDirectory(
                at: directory,
                withIntermediateDirectories: true,
                attributes: [.posixPermissions: 0o777]
            )
            let reservation = try LoopbackPortReservation()
            let port = reservation.port
            let process = Process()
            process.executableURL = URL(fileURLWithPath: executable)
            process.arguments = try arguments(port, directory)
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            let daemon = LoopbackDaemon(reservation: reservation, directory: directory, process: process)
            for _ in 0..<200 {
                if canConnect(port: port) { return daemon }
                guard process.isRunning else { break }
                usleep(50_000)
            }
            daemon.stopNow()
            throw ProxyTestError("\(name) did not start listening on port \(port)")
        }
    }

    /// Kills it (SIGKILL: tinyproxy, for one, waits for open tunnels to time out on SIGTERM).
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

    /// Runs `body` with the daemon `start` makes, stopped after it whatever happens.
    static func with<Daemon: Sendable, T: Sendable>(
        _ start: () async throws -> Daemon,
        stop: (Daemon) async -> Void,
        _ body: (Daemon) async throws -> T
    ) async throws -> T {
        let daemon = try await start()
        do {
            let result = try await body(daemon)
            await stop(daemon)
            return result
        } catch {
            await stop(daemon)
            throw error
        }
    }
}

struct ProxyTestError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Runs `body` with a loopback port that refuses connections, held (``LoopbackPortReservation``) until `body`
/// returns.
func withRefusingLoopbackPort<T>(_ body: (Int) async throws -> T) async throws -> T {
    let reservation = try LoopbackPortReservation()
    defer { withExtendedLifetime(reservation) {} }
    return try await body(reservation.port)
}

private func canConnect(port: Int) -> Bool {
    guard
        let channel = try? ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: "127.0.0.1", port: port).wait()
    else { return false }
    try? channel.close().wait()
    return true
}
