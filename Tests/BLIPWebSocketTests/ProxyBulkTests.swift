import BLIP
import BLIPTestSupport
import BLIPWebSocket
import Foundation
import NIOConcurrencyHelpers
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
    static let urgentCount = 10

    /// What the server saw: how much of the bulk body its sink had read when each urgent echo was answered.
    final class ServerRecord: Sendable {
        struct State {
            var sinkRead = 0
            var sinkReadAtUrgentEchoes: [Int] = []
        }
        // A lock ThreadSanitizer sees (NIO's, on pthreads): Synchronization's Mutex waits and wakes through
        // futexes inside the standard library, which is not built with it, so two handlers taking it in
        // turn were reported as a race.
        let state = NIOLockedValueBox(State())
    }

    /// The standard profiles, with a sink that stops reading once it has 1 MiB until every urgent echo is
    /// answered (once, for at most 30 s). Its unread body holds the client's bulk message back (its ACKs wait), so
    /// the echoes can only be answered first if they pass the bulk message mid-way, through the proxy. That
    /// is checked here, on the server, where it does not depend on how the client's tasks are scheduled:
    /// compared on the client, the bulk's reply could be seen first under load, however early the urgent
    /// replies arrived.
    static func router(recording record: ServerRecord) -> BLIPRouter {
        var router = standardRouter()
        router.register(profile: "echo") { request, _ in
            record.state.withLockedValue { $0.sinkReadAtUrgentEchoes.append($0.sinkRead) }
            return BLIPResponse(properties: request.properties, body: request.body)
        }
        router.registerStreaming(profile: "sink") { request, _ in
            var total = 0
            var waited = false
            for try await piece in request.body {
                total += piece.readableBytes
                record.state.withLockedValue { $0.sinkRead = total }
                if total >= 1 << 20 && !waited {
                    waited = true  // once: without the echoes, the rest is read at once
                    let deadline = ContinuousClock.now + .seconds(30)
                    while record.state.withLockedValue({ $0.sinkReadAtUrgentEchoes.count }) < Self.urgentCount
                        && ContinuousClock.now < deadline
                    {
                        try await Task.sleep(for: .milliseconds(1))
                    }
                }
            }
            return BLIPResponse(properties: ["Count": "\(total)"], text: "\(total)")
        }
        return router
    }

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
        let record = ServerRecord()
        try await withServer(serverConfiguration, router: Self.router(recording: record), eventLoopGroup: group) {
            server in
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
        let readAtUrgentEchoes = record.state.withLockedValue { $0.sinkReadAtUrgentEchoes }
        #expect(readAtUrgentEchoes.count == Self.urgentCount)
        #expect(
            readAtUrgentEchoes.allSatisfy { $0 < Self.bulkSize },
            "every urgent echo answered while the bulk body was still arriving: \(readAtUrgentEchoes)"
        )
    }

    /// Sends the bulk message, and urgent echoes once its first MiB has left; every reply must be right (the
    /// server checks their order, see ``router(recording:)``).
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
            let urgentAnswered = try await withThrowingTaskGroup(of: Void.self) { group in
                for number in 0..<Self.urgentCount {
                    group.addTask {
                        let reply = try await connection.sendRequest(
                            BLIPRequest(profile: "echo", text: "u\(number)", urgent: true)
                        )
                        #expect(reply.body == ByteBuffer(string: "u\(number)"))
                    }
                }
                var answered = 0
                for try await _ in group { answered += 1 }
                return answered
            }
            #expect(urgentAnswered == Self.urgentCount)
            let (reply, finished) = try await bulk
            #expect(reply.properties["Count"] == "\(Self.bulkSize)")
            let seconds = (finished - started) / .seconds(1)
            print(
                "\(label) \(target.prefix(while: { $0 != ":" })): 64 MiB up in \(String(format: "%.2f", seconds)) s = \(String(format: "%.0f", 64 / seconds)) MiB/s (debug build)"
            )
        }
    }
}
