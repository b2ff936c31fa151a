import ArgumentParser
import BLIP
import BLIPInspection
import BLIPTestSupport
import BLIPWebSocket
import NIOConcurrencyHelpers
import Testing

@testable import BLIPTool

@Suite("blip bench --rounds and --via", .timeLimit(.minutes(3)))
struct BenchRoundsTests {
    static func result(_ rate: Double) -> BenchResult {
        BenchResult(
            workload: "rt",
            count: 1,
            concurrency: 1,
            messagesPerSecond: rate,
            data: "pattern",
            compressed: false,
            direction: "both"
        )
    }

    @Test("the routes take turns, each reported as its median round, the relay's as a ratio to direct's")
    func alternatingMedians() async throws {
        let runner = BenchRunner(
            url: "ws://direct/",
            options: try BenchCommand.parse(["ws://direct/", "--via", "ws://relay/", "--rounds", "3"])
        )
        var rates = ["ws://direct/": [300.0, 100, 200], "ws://relay/": [50.0, 150, 100]]
        var order: [String] = []
        let summaries = try await runner.measureRounds { route in
            order.append(route.url)
            return Self.result(rates[route.url]!.removeFirst())
        }
        #expect(order == ["ws://direct/", "ws://relay/", "ws://relay/", "ws://direct/", "ws://direct/", "ws://relay/"])
        try #require(summaries.count == 2)
        let (direct, relay) = (summaries[0], summaries[1])
        #expect(direct.messagesPerSecond == 200 && relay.messagesPerSecond == 100)
        #expect(direct.extra["route"] as? String == "direct" && relay.extra["route"] as? String == "via")
        #expect(direct.extra["low"] as? Double == 100 && direct.extra["high"] as? Double == 300)
        #expect(relay.extra["low"] as? Double == 50 && relay.extra["high"] as? Double == 150)
        #expect(direct.extra["rounds"] as? Int == 3 && relay.extra["rounds"] as? Int == 3)
        #expect(relay.directRatio == 0.5 && direct.directRatio == nil)
        #expect(relay.json["ratio_to_direct"] as? Double == 0.5)
        #expect(relay.line.contains("= 0.50x direct"))
    }

    @Test("an even number of rounds reports the lower middle round, a figure that was measured")
    func evenRounds() {
        let median = BenchRunner.median(of: [4.0, 1, 3, 2].map(Self.result), route: .direct)
        #expect(median?.messagesPerSecond == 2)
        #expect(BenchRunner.median(of: [], route: .direct) == nil)
    }

    @Test("--rounds without --via: one route, its median")
    func roundsAlone() async throws {
        let runner = BenchRunner(url: "ws://d/", options: try BenchCommand.parse(["ws://d/", "--rounds", "4"]))
        var rates = [5.0, 7, 6, 8]
        let summaries = try await runner.measureRounds { _ in Self.result(rates.removeFirst()) }
        try #require(summaries.count == 1)
        #expect(summaries[0].messagesPerSecond == 6 && summaries[0].extra["rounds"] as? Int == 4)
        #expect(summaries[0].extra["route"] == nil && summaries[0].directRatio == nil)
    }

    @Test("a relay that cannot be reached fails the run with the connection's error, after direct's first round")
    func unreachableRelay() async throws {
        let direct = try await BLIPWebSocketServer.bindStandardProfiles()
        async let serving: Void = direct.run()
        let gone = try LoopbackPortReservation()  // nothing listens on it, nor can another suite's server meanwhile
        defer { withExtendedLifetime(gone) {} }
        let goneURL = "ws://127.0.0.1:\(gone.port)/"
        let url = "ws://127.0.0.1:\(direct.port)/"
        let runner = BenchRunner(
            url: url,
            options: try BenchCommand.parse([url, "--via", goneURL, "--rounds", "3", "--no-warm-up"])
        )
        var measured: [String] = []
        await #expect(throws: BLIPConnectionError.self) {
            try await runner.measureRounds {
                measured.append($0.url)
                return try await $0.roundTrips(count: 5, concurrency: 1, warmUp: 1, size: 100, name: "rt")
            }
        }
        #expect(measured == [url, goneURL])
        await direct.close()
        await serving
    }

    @Test("the relay's rounds go through the relay, direct's do not")
    func liveRelay() async throws {
        let server = try await BLIPWebSocketServer.bindStandardProfiles()
        async let serving: Void = server.run()
        let url = "ws://127.0.0.1:\(server.port)/"
        var proxyConfiguration = BLIPInspectingProxy.Configuration(upstream: try #require(BLIPWebSocketURL(url)))
        proxyConfiguration.port = 0
        let requests = NIOLockedValueBox(0)
        let connections = NIOLockedValueBox(0)
        let proxy = try await BLIPInspectingProxy.start(configuration: proxyConfiguration) { event in
            switch event.kind {
            case .message(.clientToServer, let message, _) where message.type == .request:
                requests.withLockedValue { $0 += 1 }
            case .accepted:
                connections.withLockedValue { $0 += 1 }
            default:
                break
            }
        }
        let runner = BenchRunner(
            url: url,
            options: try BenchCommand.parse([
                url, "--via", "ws://127.0.0.1:\(proxy.port)/", "--rounds", "3", "--no-warm-up",
            ])
        )
        let summaries = try await runner.measureRounds {
            try await $0.roundTrips(count: 10, concurrency: 2, warmUp: 2, size: 100, name: "pipelined-2")
        }
        await proxy.close()  // returns once every relayed connection's last events are reported
        // Three connections through the relay, each with 2 warm-up and 10 measured requests.
        #expect(connections.withLockedValue { $0 } == 3)
        #expect(requests.withLockedValue { $0 } == 36)
        try #require(summaries.count == 2)
        #expect(summaries.allSatisfy { $0.count == 10 && $0.extra["rounds"] as? Int == 3 })
        let ratio = try #require(summaries[1].directRatio)
        #expect(abs(ratio - summaries[1].figure! / summaries[0].figure!) < 1e-9)
        await server.close()
        await serving
    }
}
