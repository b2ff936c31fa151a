import BLIP
import BLIPWebSocket
import Foundation
import NIOCore
import NIOPosix
import Testing

/// The acceptance workload through each proxy, ws and wss: a 64 MiB message up, with urgent requests
/// answered while it streams, and the throughput printed next to the direct figure of the same run.
@Suite(
    "64 MiB and urgent requests through proxies",
    .enabled(if: TinyProxy.isAvailable && MicroSocks.isAvailable, "needs tinyproxy and microsocks (.ci/setup.sh)"),
    .enabled(if: TestCertificate.isAvailable, "needs the openssl command"),
    .timeLimit(.minutes(5)),
    .serialized  // six 64 MiB transfers at once would measure each other
)
struct ProxyBulkTests {
    enum Route: String, CaseIterable, Sendable {
        case direct, http, socks5
    }

    static let bulkSize = 64 << 20

    @Test("64 MiB up, urgent requests answered meanwhile", arguments: Route.allCases, [false, true])
    func bulkAndUrgent(route: Route, secure: Bool) async throws {
        let certificate = try await offThePool { try TestCertificate.make() }
        defer { certificate.remove() }
        var serverConfiguration = BLIPWebSocketServer.Configuration.forTests
        if secure { serverConfiguration.tls = certificate.serverTLS }
        // Loops of their own: 64 MiB through a debug build keeps a loop busy for seconds, and the shared ones
        // carry every other suite's connections (a connect elsewhere timed out behind them under load).
        let group = MultiThreadedEventLoopGroup(numberOfThreads: 1)
        defer { group.shutdownGracefully { _ in } }
        try await withServer(serverConfiguration, eventLoopGroup: group) { server in
            var configuration = BLIPWebSocketClient.Configuration()
            configuration.heartbeatInterval = nil
            configuration.handshakeTimeout = .seconds(60)
            configuration.tls.trustRoots = .pemFile(certificate.certificatePath)
            let target = "\(secure ? "wss" : "ws")://localhost:\(server.port)/"
            switch route {
            case .direct:
                try await Self.run(target: target, configuration: configuration, group: group, label: "direct")
            case .http:
                try await TinyProxy.with(connectPorts: [server.port]) { proxy in
                    configuration.proxy = BLIPProxy(url: proxy.url())
                    try await Self.run(
                        target: target,
                        configuration: configuration,
                        group: group,
                        label: "HTTP CONNECT"
                    )
                    #expect(proxy.tunnelsOpened == 1)
                }
            case .socks5:
                try await MicroSocks.with { proxy in
                    configuration.proxy = BLIPProxy(url: proxy.url())
                    try await Self.run(target: target, configuration: configuration, group: group, label: "SOCKS5")
                }
            }
        }
    }

    /// Sends the bulk message, and urgent echoes once its first MiB has left; every reply must be right, and
    /// the urgent ones must not wait for the bulk one.
    static func run(
        target: String,
        configuration: BLIPWebSocketClient.Configuration,
        group: any EventLoopGroup,
        label: String
    ) async throws {
        let body = pattern(Self.bulkSize)
        try await BLIPWebSocketClient.connect(to: target, configuration: configuration, eventLoopGroup: group) {
            connection in
            let started = ContinuousClock.now
            // Gated on the bulk's progress, not on a sleep: a release build sends 64 MiB in about 60 ms, and a
            // 50 ms sleep (overslept on a loaded machine) let it finish before the urgent requests went out.
            let (underWay, underWaySignal) = AsyncStream.makeStream(of: Void.self)
            async let bulk = {
                let reply = try await connection.sendRequest(BLIPRequest(profile: "sink", body: body)) { progress in
                    if progress.bytesSent >= 1 << 20 { underWaySignal.yield() }
                    if progress.bytesSent >= 1 << 20 || progress.state.isFinal { underWaySignal.finish() }
                }
                return (reply, ContinuousClock.now)
            }()
            for await _ in underWay { break }
            let urgentDone = try await withThrowingTaskGroup(of: ContinuousClock.Instant.self) { group in
                for number in 0..<10 {
                    group.addTask {
                        let reply = try await connection.sendRequest(
                            BLIPRequest(profile: "echo", text: "u\(number)", urgent: true)
                        )
                        #expect(reply.body == ByteBuffer(string: "u\(number)"))
                        return .now
                    }
                }
                return try await group.reduce(into: []) { $0.append($1) }
            }
            #expect(urgentDone.count == 10)
            let (reply, finished) = try await bulk
            #expect(reply.properties["Count"] == "\(Self.bulkSize)")
            #expect(urgentDone.allSatisfy { $0 < finished }, "the urgent replies came before the bulk one")
            let seconds = (finished - started) / .seconds(1)
            print(
                "\(label) \(target.prefix(while: { $0 != ":" })): 64 MiB up in \(String(format: "%.2f", seconds)) s = \(String(format: "%.0f", 64 / seconds)) MiB/s (debug build)"
            )
        }
    }
}
