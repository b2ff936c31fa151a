import BLIPInspection
import BLIPWebSocket
import BLIPWire
import Foundation
import NIOCore
import Testing

/// The JavaScript client (`/_blip/blip.js`) in headless Chromium against `blip serve --static`: the page
/// `Tests/BrowserPage` runs every check of the client's features, the Swift side calling into the page,
/// 10 000 small round trips and 64 MiB each way, and decodes the captured go-blip and LiteCore frames,
/// which must come out as the Swift decoder reads them.
@Suite("The browser client in headless Chromium", .timeLimit(.minutes(10)))
struct BrowserChecksTests {
    static let repository = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
    static let fixtureSets = ["go-blip", "litecore"]
    /// The checks the page must report (by name prefix); one missing fails the test, so that a page that
    /// stops early cannot pass.
    static let minimumChecks = 37

    static let unavailable: String? = {
        if !HeadlessChromium.isAvailable {
            return "headless Chromium is not installed: .ci/setup.sh installs the chromium and chromium-driver packages"
        }
        if ServerProcess.executable == nil { return "the blip executable was not built beside the tests" }
        return nil
    }()

    @Test(
        "every check of the test page passes in Chromium, against blip serve --static",
        .enabled(if: Self.unavailable == nil, Comment(rawValue: Self.unavailable ?? ""))
    )
    func pageChecks() async throws {
        let site = try Self.makeSite()
        defer { try? FileManager.default.removeItem(at: site) }
        // BLIP_BROWSER_SERVER names another blip (a release build, for the figures in Docs/WebBridge.md).
        let executable = ProcessInfo.processInfo.environment["BLIP_BROWSER_SERVER"].map { URL(fileURLWithPath: $0) }
        let server = try await ServerProcess.start(
            executable ?? ServerProcess.executable!,
            arguments: ["--static", site.path]
        )
        var log = ""
        defer { if !log.isEmpty { print(log) } }
        let browser: HeadlessChromium
        do {
            browser = try await HeadlessChromium.start(scriptTimeout: .seconds(480))
        } catch {
            _ = await server.stopped()
            throw error
        }
        let results: PageResults
        do {
            try await browser.navigate(to: "http://127.0.0.1:\(server.port)/index.html")
            let value = try await browser.executeAsync(
                """
                const done = arguments[arguments.length - 1];
                window.runBLIPChecks().then(r => done(JSON.stringify(r)),
                    e => done(JSON.stringify({ fatal: String(e && e.stack || e) })));
                """,
                timeout: 540
            )
            let text = try #require(value as? String, "the page returned \(String(describing: value))")
            results = try JSONDecoder().decode(PageResults.self, from: Data(text.utf8))
        } catch {
            // Say which checks had run, and how, when the page did not finish.
            let soFar = try? await browser.execute("return JSON.stringify(globalThis.blipChecksSoFar ?? null)")
            if let text = soFar as? String,
                let partial = try? JSONDecoder().decode(PageResults.self, from: Data(text.utf8))
            {
                let checks = (partial.checks ?? []).map { "\($0.ok ? "ok" : "FAILED") \($0.name): \($0.detail ?? "")" }
                Issue.record("the page did not finish; checks run so far:\n\(checks.joined(separator: "\n"))")
            }
            log = (await browser.consoleLog()).joined(separator: "\n")
            await browser.quit()
            _ = await server.stopped()
            throw error
        }
        let console = await browser.consoleLog()
        await browser.quit()
        _ = await server.stopped()

        #expect(results.fatal == nil, "the page stopped: \(results.fatal ?? "")\n\(console.joined(separator: "\n"))")
        let checks = results.checks ?? []
        #expect(checks.count >= Self.minimumChecks, "only \(checks.count) checks ran: \(checks.map(\.name))")
        for check in checks {
            #expect(check.ok, "\(check.name): \(check.detail ?? "")")
        }
        #expect(results.subprotocol == "BLIP_3+CBMobile_3")

        let roundTrips = try #require(results.roundTrips, "no round-trip figures")
        #expect(roundTrips.count == 10_000 && roundTrips.bodyBytes == 100)
        let bulk = try #require(results.bulk, "no bulk figures")
        #expect(bulk.bytes == 64 << 20)
        let raw = try #require(results.rawBaseline, "no raw WebSocket baseline")
        func ratio(_ value: Double, _ baseline: Double) -> String {
            (value / baseline).formatted(.number.precision(.fractionLength(2)))
        }
        print(
            """
            browser: \(results.userAgent ?? "?")
            browser: \(roundTrips.count) round trips of \(roundTrips.bodyBytes) B: mean \(roundTrips.meanMs) ms, \
            p50 \(roundTrips.p50Ms) ms, p99 \(roundTrips.p99Ms) ms, max \(roundTrips.maxMs) ms (LinkedIn's bridge: 48 ms); \
            raw WebSocket echo \(raw.roundTripMeanMs) ms: BLIP takes \(ratio(roundTrips.meanMs, raw.roundTripMeanMs))x
            browser: 64 MiB up in \(bulk.upMs) ms (\(bulk.upMiBps) MiB/s, \(ratio(bulk.upMiBps, raw.upMiBps))x raw's \
            \(raw.upMiBps)), down in \(bulk.downMs) ms (\(bulk.downMiBps) MiB/s, \(ratio(bulk.downMiBps, raw.downMiBps))x raw's \
            \(raw.downMiBps)); at most \(bulk.maxUnacknowledgedBytes) B unacknowledged
            """
        )

        // The page's decoder and the Swift one read the captured frames the same way.
        let expected = try Self.swiftDecodedFixtures()
        let decoded = try #require(results.fixtures, "no fixture decoding")
        #expect(Set(decoded.keys) == Set(expected.keys))
        for (scenario, directions) in expected.sorted(by: { $0.key < $1.key }) {
            for (direction, swift) in directions.sorted(by: { $0.key < $1.key }) {
                let page = decoded[scenario]?[direction]
                #expect(
                    page == swift,
                    "\(scenario) \(direction)\n page: \(page.map { "\($0)" } ?? "none")\nswift: \(swift)"
                )
            }
        }
    }

    @Test(
        "a page authenticates with a one-time session token; without one, or with a used one, it is refused",
        .enabled(if: Self.unavailable == nil, Comment(rawValue: Self.unavailable ?? ""))
    )
    func sessionTokens() async throws {
        let site = try Self.makeSite()
        defer { try? FileManager.default.removeItem(at: site) }
        let server = try await ServerProcess.start(
            ServerProcess.executable!,
            arguments: ["--static", site.path, "--session-token", "tok-1", "--session-token", "tok-2"]
        )
        let browser: HeadlessChromium
        do {
            browser = try await HeadlessChromium.start(scriptTimeout: .seconds(60))
        } catch {
            _ = await server.stopped()
            throw error
        }
        let outcome: [String: String]
        do {
            try await browser.navigate(to: "http://127.0.0.1:\(server.port)/index.html")
            let value = try await browser.executeAsync(
                """
                const done = arguments[arguments.length - 1];
                (async () => {
                  const { BLIPConnection } = await import('/_blip/blip.js');
                  const url = `ws://${location.host}/tokens`;
                  const attempt = async (options) => {
                    try {
                      const c = await BLIPConnection.connect(url, options);
                      const rtt = await c.ping();
                      const protocol = c.subprotocol;
                      await c.close();
                      return `connected ${protocol} ping ${rtt >= 0}`;
                    } catch (e) {
                      return `refused ${e.code}`;
                    }
                  };
                  const result = {};
                  result.withToken = await attempt({ sessionToken: 'tok-1' });
                  result.usedToken = await attempt({ sessionToken: 'tok-1' });
                  result.noToken = await attempt({});
                  result.unknownToken = await attempt({ sessionToken: 'nope' });
                  // A keepalive PING after 150 ms of silence, answered (within 10 s, however busy the machine
                  // is): the connection stays open.
                  const c = await BLIPConnection.connect(url, {
                    sessionToken: 'tok-2', keepAliveInterval: 150, keepAliveTimeout: 10000,
                  });
                  await new Promise((resolve) => setTimeout(resolve, 700));
                  result.keepAlive = `${c.state} pings ${c.statistics.keepAlivePings || 0}`;
                  await c.close();
                  return result;
                })().then((r) => done(JSON.stringify(r)), (e) => done(JSON.stringify({ fatal: String(e) })));
                """,
                timeout: 60
            )
            let text = try #require(value as? String)
            outcome = try JSONDecoder().decode([String: String].self, from: Data(text.utf8))
        } catch {
            await browser.quit()
            _ = await server.stopped()
            throw error
        }
        await browser.quit()
        _ = await server.stopped()
        // The server answered with the BLIP subprotocol only: the token is never echoed.
        #expect(outcome["withToken"] == "connected BLIP_3+CBMobile_3 ping true", "\(outcome)")
        // A refused upgrade reaches a page only as a failed connection (1006); the status is checked from
        // Swift below.
        #expect(outcome["usedToken"] == "refused 1006", "\(outcome)")
        #expect(outcome["noToken"] == "refused 1006", "\(outcome)")
        #expect(outcome["unknownToken"] == "refused 1006", "\(outcome)")
        let pings = Int(outcome["keepAlive"]?.split(separator: " ").last ?? "") ?? 0
        #expect(outcome["keepAlive"]?.hasPrefix("open pings") == true && pings >= 1, "\(outcome)")
    }

    /// The served folder: the test page, and the fixture frames under `fixtures/` with an index (the
    /// server lists no directories).
    static func makeSite() throws -> URL {
        let manager = FileManager.default
        let site = manager.temporaryDirectory.appendingPathComponent("blip-browser-\(UUID().uuidString)")
        try Self.copyContents(of: Self.repository.appendingPathComponent("Tests/BrowserPage"), to: site)
        var index: [String: [String: [String]]] = [:]
        for (scenario, directions) in try Self.fixtureScenarios() {
            for (direction, files) in directions {
                for file in files {
                    let target = site.appendingPathComponent("fixtures/\(file)")
                    try manager.createDirectory(
                        at: target.deletingLastPathComponent(),
                        withIntermediateDirectories: true
                    )
                    try Data(contentsOf: Self.repository.appendingPathComponent("Fixtures/\(file)")).write(to: target)
                }
                index[scenario, default: [:]][direction] = files
            }
        }
        let json = try JSONSerialization.data(withJSONObject: index, options: [.sortedKeys])
        try json.write(to: site.appendingPathComponent("fixtures/index.json"))
        return site
    }

    /// Copies the files of `source` (one level, no subfolders) into a new folder `target` by their contents.
    /// `FileManager.copyItem` also copies their owner, which only root may give away: as any other user, a
    /// copy of the repository's files (owned by whoever cloned it) fails with EPERM.
    static func copyContents(of source: URL, to target: URL) throws {
        let manager = FileManager.default
        try manager.createDirectory(at: target, withIntermediateDirectories: true)
        for name in try manager.contentsOfDirectory(atPath: source.path) {
            try Data(contentsOf: source.appendingPathComponent(name)).write(to: target.appendingPathComponent(name))
        }
    }

    /// Each captured scenario's frame files per direction (`c2s`, `s2c`), in order, relative to Fixtures/.
    static func fixtureScenarios() throws -> [String: [String: [String]]] {
        let manager = FileManager.default
        var scenarios: [String: [String: [String]]] = [:]
        for set in Self.fixtureSets {
            let folder = Self.repository.appendingPathComponent("Fixtures/\(set)")
            for scenario in try manager.contentsOfDirectory(atPath: folder.path).sorted() {
                let path = folder.appendingPathComponent(scenario).path
                guard let files = try? manager.contentsOfDirectory(atPath: path) else { continue }
                let frames = files.filter { $0.hasPrefix("f") && $0.hasSuffix(".bin") }.sorted()
                guard !frames.isEmpty else { continue }
                for direction in ["c2s", "s2c"] {
                    scenarios["\(set)/\(scenario)", default: [:]][direction] =
                        frames.filter { $0.contains("-\(direction)-") }.map { "\(set)/\(scenario)/\($0)" }
                }
            }
        }
        return scenarios
    }

    /// The same scenarios through ``BLIPTrafficDecoder``, in the page's terms.
    static func swiftDecodedFixtures() throws -> [String: [String: DecodedDirection]] {
        var result: [String: [String: DecodedDirection]] = [:]
        for (scenario, directions) in try Self.fixtureScenarios() {
            for (direction, files) in directions {
                let decoder = BLIPTrafficDecoder(dialect: .blip3)
                var decoded = DecodedDirection(messages: [], acks: [])
                for file in files {
                    let bytes = try Data(contentsOf: Self.repository.appendingPathComponent("Fixtures/\(file)"))
                    let step = try decoder.decode(ByteBuffer(bytes: bytes))
                    if case .ack(let count) = step.frame.kind {
                        let type = step.frame.header.type.rawValue == 4 ? "ACKMSG" : "ACKRPY"
                        decoded.acks!.append(.init(type: type, number: step.frame.header.messageNumber, bytes: count))
                    }
                    guard let message = step.message else { continue }
                    decoded.messages!.append(
                        .init(
                            number: message.number,
                            type: ["MSG", "RPY", "ERR"][Int(message.type.rawValue)],
                            urgent: message.flags.contains(.urgent),
                            noReply: message.flags.contains(.noReply),
                            compressed: message.flags.contains(.compressed),
                            properties: message.properties.map { [$0.name, $0.value] },
                            bodyLength: message.bodyLength,
                            bodySHA256: message.bodySHA256 ?? "",
                            frames: message.frameCount
                        )
                    )
                }
                result[scenario, default: [:]][direction] = decoded
            }
        }
        return result
    }
}
