import Foundation
import Glibc
import NIOCore
import NIOPosix

/// Headless Chromium driven over WebDriver (W3C, through `chromedriver`), for the tests that run the
/// browser client in a real browser: open a page, run an async script, read back what it returns.
final class HeadlessChromium: @unchecked Sendable {  // lets only; Process is safe across threads
    /// The browser and its driver, from the environment (`BLIP_CHROMIUM`, `BLIP_CHROMEDRIVER`) or where the
    /// Debian packages `chromium` and `chromium-driver` put them.
    static var chromium: String? {
        Self.firstExecutable(
            ProcessInfo.processInfo.environment["BLIP_CHROMIUM"],
            "/usr/bin/chromium",
            "/usr/bin/chromium-browser"
        )
    }
    static var chromedriver: String? {
        Self.firstExecutable(ProcessInfo.processInfo.environment["BLIP_CHROMEDRIVER"], "/usr/bin/chromedriver")
    }
    static var isAvailable: Bool { Self.chromium != nil && Self.chromedriver != nil }

    private static func firstExecutable(_ candidates: String?...) -> String? {
        candidates.compactMap { $0 }.first { FileManager.default.isExecutableFile(atPath: $0) }
    }

    struct DriverError: Error, CustomStringConvertible {
        var description: String
    }

    private let base: URL
    private let session: String
    private let profile: URL

    private init(driverPort: Int, session: String, profile: URL) {
        self.base = URL(string: "http://127.0.0.1:\(driverPort)/session/\(session)")!
        self.session = session
        self.profile = profile
    }

    /// Starts `chromedriver` on a free loopback port and opens a browser session; `scriptTimeout` bounds
    /// every async script.
    static func start(scriptTimeout: Duration) async throws -> HeadlessChromium {
        guard let chromium = Self.chromium, let chromedriver = Self.chromedriver else {
            throw DriverError(description: "chromium or chromedriver is not installed")
        }
        let driver = Process()
        driver.executableURL = URL(fileURLWithPath: chromedriver)
        driver.arguments = ["--port=0", "--allowed-ips=127.0.0.1"]
        let output = Pipe()
        driver.standardOutput = output
        driver.standardError = FileHandle.nullDevice
        try driver.run()
        // "ChromeDriver was started successfully on port N." comes within its first lines; read on a Dispatch
        // thread so that a slow start does not hold one of the few threads of Swift concurrency. A driver
        // that never says is killed after a minute, which ends the read.
        let giveUp = DispatchWorkItem { _ = Glibc.kill(driver.processIdentifier, SIGKILL) }
        DispatchQueue.global().asyncAfter(deadline: .now() + 60, execute: giveUp)
        let port: Int
        do {
            port = try await withCheckedThrowingContinuation { continuation in
                DispatchQueue.global().async {
                    continuation.resume(with: Result { try Self.readPort(output.fileHandleForReading) })
                    // Whatever it writes later must not fill the pipe and block it.
                    _ = try? output.fileHandleForReading.readToEnd()
                }
            }
            giveUp.cancel()
        } catch {
            giveUp.cancel()
            await Self.kill(driver)
            throw error
        }
        let profile = FileManager.default.temporaryDirectory.appendingPathComponent(
            "blip-chromium-\(UUID().uuidString)"
        )
        let capabilities: [String: Any] = [
            "capabilities": [
                "alwaysMatch": [
                    "browserName": "chrome",
                    "goog:chromeOptions": [
                        "binary": chromium,
                        // Root in a container has no sandbox to offer; /dev/shm there is small.
                        "args": [
                            "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                            "--no-first-run", "--user-data-dir=\(profile.path)",
                        ],
                    ],
                    "goog:loggingPrefs": ["browser": "ALL"],
                ] as [String: Any]
            ]
        ]
        do {
            let created = try await Self.call(
                "POST",
                URL(string: "http://127.0.0.1:\(port)/session")!,
                capabilities,
                timeout: 120
            )
            guard let value = created as? [String: Any], let session = value["sessionId"] as? String else {
                throw DriverError(description: "no session in \(String(describing: created))")
            }
            let browser = HeadlessChromium(driverPort: port, session: session, profile: profile)
            browser.adopt(driver)
            let milliseconds = Int(scriptTimeout / .milliseconds(1))
            _ = try await browser.call("POST", "timeouts", ["script": milliseconds, "pageLoad": 120_000])
            return browser
        } catch {
            await Self.kill(driver)
            throw error
        }
    }

    /// Stops the driver for good: SIGKILL, since it inherits this process's signal mask, in which the
    /// test runner may have blocked SIGTERM. Waits for it on a Dispatch thread.
    private static func kill(_ driver: Process) async {
        guard driver.isRunning else { return }
        _ = Glibc.kill(driver.processIdentifier, SIGKILL)
        await withCheckedContinuation { continuation in
            DispatchQueue.global().async {
                driver.waitUntilExit()
                continuation.resume()
            }
        }
    }

    private var adopted: Process?
    private func adopt(_ process: Process) { self.adopted = process }

    private static func readPort(_ handle: FileHandle) throws -> Int {
        var text = ""
        while let byte = try handle.read(upToCount: 1), !byte.isEmpty {
            text += String(decoding: byte, as: UTF8.self)
            if text.hasSuffix("\n"), let range = text.range(of: "successfully on port ") {
                let digits = text[range.upperBound...].prefix(while: \.isNumber)
                if let port = Int(digits) { return port }
            }
            if text.count > 4096 { break }
        }
        throw DriverError(description: "chromedriver did not say its port: \(text)")
    }

    func navigate(to url: String) async throws {
        _ = try await self.call("POST", "url", ["url": url])
    }

    /// Runs `script` as WebDriver's async script (its last argument is the callback) and returns the
    /// value passed to the callback.
    func executeAsync(_ script: String, timeout: TimeInterval) async throws -> Any? {
        try await self.call("POST", "execute/async", ["script": script, "args": []], timeout: timeout)
    }

    /// Runs `script` synchronously in the page and returns what it returns.
    func execute(_ script: String) async throws -> Any? {
        try await self.call("POST", "execute/sync", ["script": script, "args": []], timeout: 30)
    }

    /// The page's console messages so far (to explain a failure).
    func consoleLog() async -> [String] {
        guard let entries = try? await self.call("POST", "se/log", ["type": "browser"]) as? [[String: Any]] else {
            return []
        }
        return entries.map { "\($0["level"] ?? "?"): \($0["message"] ?? "")" }
    }

    /// Ends the session (the browser exits) and stops the driver.
    func quit() async {
        _ = try? await self.call("DELETE", "", nil, timeout: 30)
        if let driver = self.adopted { await Self.kill(driver) }
        try? FileManager.default.removeItem(at: self.profile)
    }

    private func call(_ method: String, _ path: String, _ body: [String: Any]?, timeout: TimeInterval = 120)
        async throws
        -> Any?
    {
        let url = path.isEmpty ? self.base : self.base.appendingPathComponent(path)
        return try await Self.call(method, url, body, timeout: timeout)
    }

    /// One WebDriver command: a JSON body in, the response's `value` out; a WebDriver error becomes a thrown
    /// ``DriverError`` with its message. Spoken over a plain socket: chromedriver writes header fields
    /// without a space after the colon, which FoundationNetworking's URLSession on Linux refuses.
    private static func call(_ method: String, _ url: URL, _ body: [String: Any]?, timeout: TimeInterval) async throws
        -> Any?
    {
        let payload = try body.map { try JSONSerialization.data(withJSONObject: $0) } ?? Data()
        var head = "\(method) \(url.path) HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        head += "Content-Type: application/json\r\nContent-Length: \(payload.count)\r\n\r\n"
        let response = try await Self.exchange(
            port: url.port ?? 80,
            Array(head.utf8) + Array(payload),
            timeout: .milliseconds(Int64(timeout * 1000))
        )
        guard let end = response.firstRange(of: Array("\r\n\r\n".utf8)) else {
            throw DriverError(description: "\(method) \(url.path): no HTTP response (\(response.count) bytes)")
        }
        let data = Data(response[end.upperBound...])
        let json = try JSONSerialization.jsonObject(with: data, options: [.fragmentsAllowed]) as? [String: Any]
        let value = json?["value"]
        if let error = value as? [String: Any], let kind = error["error"] as? String {
            throw DriverError(description: "\(method) \(url.path): \(kind): \(error["message"] ?? "")")
        }
        return value is NSNull ? nil : value
    }

    /// The length of the whole response once its head has arrived (head and `Content-Length` bytes of
    /// body; chromedriver keeps the connection open whatever the request asks).
    private static func completeLength(_ bytes: [UInt8]) -> Int? {
        guard let end = bytes.firstRange(of: Array("\r\n\r\n".utf8)) else { return nil }
        let head = String(decoding: bytes[..<end.lowerBound], as: UTF8.self).lowercased()
        for line in head.split(separator: "\r\n") where line.hasPrefix("content-length:") {
            if let length = Int(line.dropFirst("content-length:".count).trimmingCharacters(in: .whitespaces)) {
                return end.upperBound + length
            }
        }
        return nil
    }

    /// Sends `request` and returns the response (all of it up to its `Content-Length`, or until the server
    /// closes); the connection is closed after `timeout` at the latest.
    private static func exchange(port: Int, _ request: [UInt8], timeout: TimeAmount) async throws -> [UInt8] {
        let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
            .connect(host: "127.0.0.1", port: port) { channel in
                channel.eventLoop.makeCompletedFuture {
                    try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
                }
            }
        let deadline = channel.channel.eventLoop.scheduleTask(in: timeout) { channel.channel.close(promise: nil) }
        defer { deadline.cancel() }
        return try await channel.executeThenClose { inbound, outbound in
            try await outbound.write(ByteBuffer(bytes: request))
            var received: [UInt8] = []
            for try await chunk in inbound {
                received += chunk.readableBytesView
                if let length = Self.completeLength(received), received.count >= length { break }
            }
            return received
        }
    }
}
