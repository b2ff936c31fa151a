internal import ArgumentParser
internal import BLIPInspection
internal import BLIPWebSocket
internal import BLIPWire
internal import Foundation
internal import NIOConcurrencyHelpers
internal import NIOCore
internal import UnixSignals

struct ProxyCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "proxy",
        abstract: "Relay WebSocket clients to a BLIP server, unchanged, and show the traffic decoded live.",
        discussion: """
            Each client's handshake goes to --upstream as the client wrote it (Host becomes the upstream's), \
            and the upstream's answer, a refusal included, comes back as written. Then every byte is relayed \
            unchanged both ways, and each direction is decoded in the dialect the upstream chose: one line per \
            message as its last frame passes, or one JSON object per line with --json. A direction that cannot \
            be decoded (a checksum mismatch, an inflate failure) is reported once and still relayed. Stops on \
            SIGINT or SIGTERM.
            """
    )

    @Option(help: "Address to listen on, HOST:PORT (port 0 picks a free one, printed on standard error).")
    var listen = "127.0.0.1:4984"
    @Option(help: "The server to relay to: ws://HOST[:PORT][/PREFIX] or wss://... (a path is put before the client's).")
    var upstream: String
    @Option(help: "PEM certificate chain: clients reach the proxy with wss://.") var tlsCert: String?
    @Option(help: "PEM private key of --tls-cert.") var tlsKey: String?
    @OptionGroup(title: "Upstream TLS") var upstreamTLS: ClientTLSOptions
    @Flag(help: "One JSON object per line: blip decode --json's fields, plus connection, direction, event and time.")
    var json = false
    @Option(help: "Write each upgraded connection's frames and handshake under this folder (Fixtures format).")
    var capture: String?
    @Flag(
        help: "Show Authorization, Proxy-Authorization, Cookie and Set-Cookie as (redacted), in the log and captures."
    )
    var redact = false
    @Option(name: .customLong("redact-property"), help: "Show this BLIP property's value as (redacted) (repeatable).")
    var redactedProperties: [String] = []
    @Flag(help: "Relay only: report handshakes and closes, do not decode BLIP.") var noDecode = false
    @Flag(help: "Also show ACKs, pings and pongs, and every handshake header (text output).") var verbose = false
    @Option(help: "Largest WebSocket message decoded, in bytes; a larger one stops decoding its direction.")
    var maxMessageSize = 16 << 20

    func validate() throws {
        if (self.tlsCert == nil) != (self.tlsKey == nil) {
            throw ValidationError("--tls-cert and --tls-key go together")
        }
        try WebSocketURLArgument.check(self.upstream, as: "--upstream")
        guard let (_, port) = Self.split(self.listen), (0...65_535).contains(port) else {
            throw ValidationError("--listen takes HOST:PORT with a port of 0 to 65535, not '\(self.listen)'")
        }
    }

    static func split(_ address: String) -> (host: String, port: Int)? {
        guard let colon = address.lastIndex(of: ":"), let port = Int(address[address.index(after: colon)...]) else {
            return nil
        }
        let host = address[..<colon].trimmingCharacters(in: CharacterSet(charactersIn: "[]"))
        return host.isEmpty ? nil : (host, port)
    }

    var proxyConfiguration: BLIPInspectingProxy.Configuration {
        var configuration = BLIPInspectingProxy.Configuration(upstream: BLIPWebSocketURL(self.upstream)!)
        let (host, port) = Self.split(self.listen)!
        configuration.host = host
        configuration.port = port
        self.upstreamTLS.apply(to: &configuration.upstreamTLS)
        if let certificate = self.tlsCert, let key = self.tlsKey {
            configuration.tls = .init(certificateChainPath: certificate, privateKeyPath: key)
        }
        configuration.decodes = !self.noDecode
        configuration.captureDirectory = self.capture
        configuration.redactedHeaders = self.redact ? BLIPInspectingProxy.Configuration.credentialHeaders : []
        configuration.maximumMessageSize = self.maxMessageSize
        return configuration
    }

    func run() async throws {
        // Trapped before the listening line goes out: a signal right after it must stop the proxy cleanly.
        let signals = await UnixSignalsSequence(trapping: .sigterm, .sigint)
        let output = LineOutput()
        let format = ProxyLogFormat(
            json: self.json,
            verbose: self.verbose,
            redactedProperties: Set(self.redactedProperties)
        )
        let configuration = self.proxyConfiguration
        let proxy: BLIPInspectingProxy
        do {
            proxy = try await BLIPInspectingProxy.start(configuration: configuration) { event in
                var line: [UInt8] = []
                line.reserveCapacity(512)
                if format.write(event, into: &line) { output.append(line) }
            }
        } catch let error where ToolFailure.isListenFailure(error) {
            throw ToolFailure.cannotListen(on: configuration.host, port: configuration.port, error)
        }
        let scheme = self.tlsCert == nil ? "ws" : "wss"
        // The port last, as `serve` ends its first line: scripts and tests read it from there.
        FileHandle.standardError.write(
            Data(
                "blip proxy: relaying to \(self.upstream), listening on \(scheme)://\(proxy.configuration.host):\(proxy.port)\n"
                    .utf8
            )
        )
        let flushing = Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: .milliseconds(100))
                output.flush()
            }
        }
        for await _ in signals { break }
        await proxy.close()
        flushing.cancel()
        output.flush()
    }
}

/// Lines for standard output, written in blocks: a write per line would cost the relay more than the
/// decoding does. Flushed when a block fills and every 100 ms. A block is written under the lock, so lines
/// from two event loops never interleave, and a full pipe holds back the relay (the observer runs on its
/// event loop) rather than growing memory.
final class LineOutput: Sendable {
    private let buffer = NIOLockedValueBox([UInt8]())
    private static let blockSize = 64 * 1024

    func append(_ line: [UInt8]) {
        self.buffer.withLockedValue { buffer in
            buffer.append(contentsOf: line)
            buffer.append(UInt8(ascii: "\n"))
            if buffer.count >= Self.blockSize { Self.drain(&buffer) }
        }
    }

    func flush() {
        self.buffer.withLockedValue { Self.drain(&$0) }
    }

    private static func drain(_ buffer: inout [UInt8]) {
        buffer.withUnsafeBytes { raw in
            var offset = 0
            while offset < raw.count {
                let written = Foundation.write(1, raw.baseAddress! + offset, raw.count - offset)
                if written <= 0 { break }
                offset += written
            }
        }
        buffer.removeAll(keepingCapacity: true)
    }
}
