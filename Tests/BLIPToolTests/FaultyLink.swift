import Foundation
import Synchronization

/// Two network namespaces joined by a veth pair, one for a `blip serve` and one for a `blip session`, with
/// nftables rules and the link's state to make the network between them fail as real ones do: random loss,
/// a blackhole (everything dropped, no reset), resets, an outage. Needs root (and `ip`, `nft`); each link has
/// names and addresses of its own, and is removed by ``remove()``.
final class FaultyLink: Sendable {
    private static let counter = Atomic<Int>(0)

    /// Why links cannot be made here (printed by the tests that skip); nil when they can.
    static let unavailable: String? = {
        if getuid() != 0 { return "network namespaces need root (they run in CI's root pass)" }
        for tool in ["/usr/sbin/ip", "/usr/sbin/nft"] where !FileManager.default.isExecutableFile(atPath: tool) {
            return "\(tool) is missing (.ci/setup.sh installs iproute2 and nftables)"
        }
        let probe = "blipprobe\(getpid() % 100_000)"
        guard (try? FaultyLink.run(["ip", "netns", "add", probe])) != nil else {
            return "network namespaces cannot be created here"
        }
        _ = try? FaultyLink.run(["ip", "netns", "del", probe])
        return nil
    }()

    let serverNamespace: String
    let clientNamespace: String
    let serverAddress: String
    let clientAddress: String
    private let serverDevice: String
    private let clientDevice: String

    init() throws {
        let id = Self.counter.add(1, ordering: .relaxed).newValue
        let tag = "\(getpid() % 10_000)x\(id)"
        self.serverNamespace = "blips\(tag)"
        self.clientNamespace = "blipc\(tag)"
        self.serverDevice = "vs\(tag)"
        self.clientDevice = "vc\(tag)"
        let clientDevice = self.clientDevice
        let subnet = "10.\(200 + (getpid() % 50)).\(id % 250)"
        self.serverAddress = "\(subnet).1"
        self.clientAddress = "\(subnet).2"
        try Self.run(["ip", "netns", "add", self.serverNamespace])
        try Self.run(["ip", "netns", "add", self.clientNamespace])
        try Self.run(["ip", "link", "add", self.serverDevice, "type", "veth", "peer", "name", clientDevice])
        try Self.run(["ip", "link", "set", self.serverDevice, "netns", self.serverNamespace])
        try Self.run(["ip", "link", "set", clientDevice, "netns", self.clientNamespace])
        for (namespace, device, address) in [
            (self.serverNamespace, self.serverDevice, self.serverAddress),
            (self.clientNamespace, clientDevice, self.clientAddress),
        ] {
            try Self.run(["ip", "-n", namespace, "addr", "add", "\(address)/24", "dev", device])
            try Self.run(["ip", "-n", namespace, "link", "set", device, "up"])
            try Self.run(["ip", "-n", namespace, "link", "set", "lo", "up"])
            try Self.run(["ip", "netns", "exec", namespace, "nft", "add", "table", "inet", "fault"])
            try Self.run([
                "ip", "netns", "exec", namespace, "nft", "add", "chain", "inet", "fault", "output",
                "{ type filter hook output priority 0 ; }",
            ])
            try Self.run([
                "ip", "netns", "exec", namespace, "nft", "add", "chain", "inet", "fault", "input",
                "{ type filter hook input priority 0 ; }",
            ])
        }
    }

    func remove() {
        _ = try? Self.run(["ip", "netns", "del", self.serverNamespace])
        _ = try? Self.run(["ip", "netns", "del", self.clientNamespace])
    }

    /// Drops `percent` of the packets each side sends over the link (nftables' random number generator).
    func loss(percent: Int) throws {
        for (namespace, device) in [
            (self.serverNamespace, self.serverDevice), (self.clientNamespace, self.clientDevice),
        ] {
            try self.nft(
                namespace,
                [
                    "add", "rule", "inet", "fault", "output", "oifname", device, "numgen", "random", "mod", "100", "<",
                    "\(percent)", "drop",
                ]
            )
        }
    }

    /// Drops everything the server's side sends or receives, without a reset: to the client, the server has
    /// vanished.
    func blackhole() throws {
        try self.nft(self.serverNamespace, ["add", "rule", "inet", "fault", "input", "drop"])
        try self.nft(self.serverNamespace, ["add", "rule", "inet", "fault", "output", "drop"])
    }

    /// Takes every rule away: the link works again.
    func heal() throws {
        for namespace in [self.serverNamespace, self.clientNamespace] {
            try self.nft(namespace, ["flush", "chain", "inet", "fault", "input"])
            try self.nft(namespace, ["flush", "chain", "inet", "fault", "output"])
        }
    }

    /// Takes the server's end of the link down, or up again.
    func setLink(up: Bool) throws {
        try Self.run(["ip", "-n", self.serverNamespace, "link", "set", self.serverDevice, up ? "up" : "down"])
    }

    private func nft(_ namespace: String, _ arguments: [String]) throws {
        try Self.run(["ip", "netns", "exec", namespace, "nft"] + arguments)
    }

    /// A process in `namespace`, its standard output and error going to files (read with ``output(of:)``).
    func start(in namespace: String, _ arguments: [String]) throws -> (Process, URL) {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/sbin/ip")
        process.arguments = ["netns", "exec", namespace] + arguments
        var environment = ProcessInfo.processInfo.environment
        environment["LLVM_PROFILE_FILE"] = "/dev/null"
        process.environment = environment
        let log = FileManager.default.temporaryDirectory.appendingPathComponent("blip-link-\(UUID().uuidString).log")
        _ = FileManager.default.createFile(atPath: log.path, contents: nil)
        let handle = try FileHandle(forWritingTo: log)
        process.standardOutput = handle
        process.standardError = handle
        try process.run()
        return (process, log)
    }

    /// Runs a command to its end; throws when it fails.
    @discardableResult
    static func run(_ arguments: [String]) throws -> String {
        let process = Process()
        process.executableURL = URL(fileURLWithPath: "/usr/bin/env")
        process.arguments = arguments
        let output = Pipe()
        process.standardOutput = output
        process.standardError = output
        try process.run()
        let text = String(decoding: output.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        guard process.terminationStatus == 0 else {
            throw CocoaError(
                .executableLoad,
                userInfo: [NSLocalizedDescriptionKey: "\(arguments.joined(separator: " ")): \(text)"]
            )
        }
        return text
    }
}
