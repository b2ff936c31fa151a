internal import ArgumentParser
internal import BLIP
internal import BLIPWebSocket
internal import Foundation
internal import Logging
internal import NIOCore

struct RequestCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "request",
        abstract: "Send one request and print the reply.",
        discussion: """
            Exit status: 0 for a reply, 3 for an ERR reply, 2 when the server refuses the WebSocket handshake \
            (its status, WWW-Authenticate, Location and the start of its body go to standard error), 1 for \
            another connection or protocol failure.
            """
    )

    @Argument(help: "ws:// or wss:// URL.") var url: String
    @Option(help: "The request's Profile.") var profile: String
    @Option(name: .customLong("prop"), help: "A property, as KEY=VALUE (repeatable).") var properties: [String] = []
    @Option(help: "The body, as text.") var body: String?
    @Option(
        help: """
            Read the body from a file, a pipe or '-' (standard input) as it is sent: any size in little memory \
            (with --no-reply it is read whole first).
            """
    )
    var bodyFile: String?
    @Flag(help: "Send ahead of normal traffic.") var urgent = false
    @Flag(help: "Compress the body.") var compressed = false
    @Flag(help: "Ask for no reply.") var noReply = false
    @Option(name: .customLong("subprotocol"), help: "Subprotocol to offer (repeatable, preferred first).")
    var subprotocols: [String] = []
    @Option(help: "'seed' speaks the 2013 seed dialect (no subprotocol).") var dialect: DialectOption?
    @Option(name: .customLong("header"), help: "Extra request header, as 'Name: value' (repeatable).")
    var headers: [String] = []
    @Option(help: "Credentials as USER:PASS, sent as Authorization: Basic (user:pass@ in the URL works too).")
    var user: String?
    @Option(help: "Redirects of the handshake to follow (0: none).") var maxRedirects = 5
    @Option(help: "Accept only a server certificate with this SHA-256 (hex).") var pinSha256: String?
    @Option(
        help: """
            Accept only a server whose chain holds a certificate with this SHA-256 (hex), the chain verified \
            up to it (repeatable: a backup pin).
            """
    )
    var pinChainSha256: [String] = []
    @Option(help: "Write every frame under this folder.") var capture: String?
    @OptionGroup var reach: ClientReachOptions
    @Flag(help: "Print the reply as one JSON object.") var json = false
    @Option(help: "Seconds to wait for the reply; then the request fails (exit status 1).") var timeout: Double?

    func validate() throws {
        try WebSocketURLArgument.check(self.url, as: "<url>")
        if self.body != nil && self.bodyFile != nil {
            throw ValidationError("--body and --body-file exclude each other")
        }
        for property in self.properties where !property.contains("=") {
            throw ValidationError("--prop takes KEY=VALUE, not '\(property)'")
        }
        for header in self.headers where !header.contains(":") || header.hasPrefix(":") {
            throw ValidationError("--header takes 'Name: value', not '\(header)'")
        }
        for header in self.headers {
            let name = String(header.prefix { $0 != ":" }).trimmed
            guard HTTPField.Name(name) != nil else {
                throw ValidationError("--header: '\(name)' is not a header name (letters, digits and !#$%&'*+-.^_`|~)")
            }
        }
        if let user = self.user {
            guard user.contains(":") else { throw ValidationError("--user takes USER:PASS") }
            if self.headers.contains(where: { $0.lowercased().hasPrefix("authorization:") }) {
                throw ValidationError("--user and an Authorization --header exclude each other")
            }
        }
        if self.maxRedirects < 0 { throw ValidationError("--max-redirects takes 0 or more") }
        if let timeout = self.timeout, !(timeout > 0 && timeout <= 86_400) {
            throw ValidationError("--timeout takes seconds, more than 0 and at most 86400")
        }
        if let pin = self.pinSha256, Self.hexBytes(pin)?.count != 32 {
            throw ValidationError("--pin-sha256 takes 64 hex digits")
        }
        if self.pinChainSha256.contains(where: { Self.hexBytes($0)?.count != 32 }) {
            throw ValidationError("--pin-chain-sha256 takes 64 hex digits")
        }
    }

    func run() async throws {
        var request = try self.makeRequest()
        // Opened before connecting, so that a path that cannot be read fails first.
        let bodyFile = try self.bodyFile.map(BodyFile.init(path:))
        if let bodyFile, self.noReply { request.body = try await bodyFile.readAll() }
        let configuration = self.makeConfiguration()
        var logger = Logger(label: "blip.request")
        logger.logLevel = .warning
        let noReply = self.noReply
        let timeout = self.timeout.map { Duration.milliseconds(Int64(($0 * 1000).rounded(.up))) }
        let outcome: Outcome
        do {
            outcome = try await BLIPWebSocketClient.connect(to: self.url, configuration: configuration, logger: logger)
            {
                connection in
                if noReply {
                    try await connection.sendNoReply(request, timeout: timeout)
                    return Outcome.none
                }
                do {
                    if let bodyFile {
                        return .reply(try await connection.sendRequest(request, body: bodyFile, timeout: timeout))
                    }
                    return .reply(try await connection.sendRequest(request, timeout: timeout))
                } catch let error as BLIPError {
                    return .error(error)
                }
            }
        } catch let refusal as BLIPHandshakeError {
            if self.json {
                Swift.print(Self.jsonLine(Self.jsonObject(refusal)))
            } else {
                FileHandle.standardError.write(Data(Self.report(refusal).utf8))
            }
            throw ExitCode(2)
        } catch {
            if self.json {
                Swift.print(Self.jsonLine(["type": "failure", "error": ToolFailure.describe(error)]))
            } else {
                FileHandle.standardError.write(Data("blip: \(ToolFailure.describe(error))\n".utf8))
            }
            throw ExitCode(1)
        }
        self.print(outcome)
        if case .error = outcome { throw ExitCode(3) }
    }

    /// What a refused handshake said, for standard error: the status line, the headers that say what to do
    /// next, and the start of the body.
    static func report(_ refusal: BLIPHandshakeError) -> String {
        var lines = ["blip: the server refused the WebSocket handshake (\(refusal.code))"]
        if let detail = refusal.detail { lines.append("blip: \(detail)") }
        for url in refusal.redirects { lines.append("redirected from \(url)") }
        lines.append("HTTP \(refusal.status) \(refusal.reason) from \(refusal.url)")
        for field in refusal.headers
        where [.wwwAuthenticate, .location, .retryAfter].contains(field.name) {
            lines.append("\(field.name): \(field.value)")
        }
        if !refusal.body.isEmpty {
            lines.append("")
            lines.append(
                refusal.bodyText + (refusal.bodyIsTruncated ? "\n[body cut at \(refusal.body.count) bytes]" : "")
            )
        }
        return lines.joined(separator: "\n") + "\n"
    }

    static func jsonObject(_ refusal: BLIPHandshakeError) -> [String: Any] {
        var object: [String: Any] = [
            "type": "handshake-refused",
            "kind": "\(refusal.code)",
            "status": refusal.status,
            "url": refusal.url,
            "redirects": refusal.redirects,
            "headers": refusal.headers.map { [$0.name, $0.value] },
            "body": refusal.bodyText,
            "body_truncated": refusal.bodyIsTruncated,
            "transient": refusal.isTransient,
        ]
        if let detail = refusal.detail { object["detail"] = detail }
        return object
    }

    func makeConfiguration() -> BLIPWebSocketClient.Configuration {
        var configuration = BLIPWebSocketClient.Configuration()
        if !self.subprotocols.isEmpty { configuration.subprotocols = self.subprotocols }
        configuration.usesSeedDialect = self.dialect?.isSeed ?? false
        configuration.captureDirectory = self.capture
        for header in self.headers {
            let parts = header.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            configuration.headers.add(
                name: String(parts[0]).trimmed,
                value: parts.count > 1 ? String(parts[1]).trimmed : ""
            )
        }
        if let user = self.user, let colon = user.firstIndex(of: ":") {
            configuration.credentials = .basic(
                user: String(user[..<colon]),
                password: String(user[user.index(after: colon)...])
            )
        }
        configuration.maximumRedirects = self.maxRedirects
        self.reach.apply(to: &configuration)
        configuration.tls.pinnedCertificateSHA256 = self.pinSha256.flatMap(Self.hexBytes)
        configuration.tls.pinnedChainSHA256 = self.pinChainSha256.compactMap(Self.hexBytes)
        configuration.heartbeatInterval = nil
        return configuration
    }

    enum Outcome {
        case reply(BLIPResponse)
        case error(BLIPError)
        case none
    }

    func makeRequest() throws -> BLIPRequest {
        var properties = BLIPProperties()
        for property in self.properties {
            let parts = property.split(separator: "=", maxSplits: 1)
            properties[String(parts[0])] = parts.count > 1 ? String(parts[1]) : ""
        }
        var body = ByteBuffer()
        if let text = self.body { body.writeString(text) }
        return BLIPRequest(
            profile: self.profile,
            properties: properties,
            body: body,
            urgent: self.urgent,
            compressed: self.compressed
        )
    }

    private func print(_ outcome: Outcome) {
        switch outcome {
        case .none:
            Swift.print(
                self.json ? Self.jsonLine(["type": "none", "properties": [String: String]()]) : "(no reply requested)"
            )
        case .reply(let response):
            self.printMessage(type: "RPY", properties: response.properties, body: response.body, error: nil)
        case .error(let error):
            self.printMessage(
                type: "ERR",
                properties: error.errorReplyProperties,
                body: ByteBuffer(string: error.message),
                error: error
            )
        }
    }

    private func printMessage(type: String, properties: BLIPProperties, body: ByteBuffer, error: BLIPError?) {
        let text = String(validating: body.readableBytesView, as: UTF8.self)
        if self.json {
            var object: [String: Any] = [
                "type": type,
                "properties": Dictionary(properties.map { ($0.name, $0.value) }, uniquingKeysWith: { $1 }),
                "body_base64": Data(body.readableBytesView).base64EncodedString(),
            ]
            if let text { object["body"] = text }
            if let error {
                object["error_domain"] = error.domain.rawValue
                object["error_code"] = Int(error.code.rawValue)
            }
            Swift.print(Self.jsonLine(object))
            return
        }
        if let error { Swift.print("ERR \(error.domain)/\(error.code)") }
        for property in properties { Swift.print("\(property.name): \(property.value)") }
        Swift.print("")
        Swift.print(text ?? "<\(body.readableBytes) bytes of binary data>")
    }

    static func jsonLine(_ object: [String: Any]) -> String {
        let data =
            (try? JSONSerialization.data(withJSONObject: object, options: [.sortedKeys, .withoutEscapingSlashes]))
            ?? Data()
        return String(decoding: data, as: UTF8.self)
    }

    static func hexBytes(_ hex: String) -> [UInt8]? {
        let digits = Array(hex.filter { !$0.isWhitespace && $0 != ":" })
        guard digits.count % 2 == 0 else { return nil }
        var bytes: [UInt8] = []
        for index in stride(from: 0, to: digits.count, by: 2) {
            guard let byte = UInt8(String(digits[index...index + 1]), radix: 16) else { return nil }
            bytes.append(byte)
        }
        return bytes
    }
}

extension String {
    var trimmed: String {
        String(self.drop { $0 == " " }.reversed().drop { $0 == " " }.reversed())
    }
}
