internal import ArgumentParser
internal import BLIP
internal import BLIPWebBridge
internal import BLIPWebSocket
internal import Dispatch
internal import Foundation
internal import Logging
internal import NIOConcurrencyHelpers
internal import NIOCore
internal import ServiceLifecycle
internal import UnixSignals

struct ServeCommand: AsyncParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "serve",
        abstract: "Serve the standard test profiles over WebSocket, and optionally a folder of web files.",
        discussion: """
            Profiles: echo, sink, source, stream-source, error, stats, whoami, delay (answers after \
            Milliseconds), call-peer (asks the client Call-Profile and relays its answer), close-connection \
            (closes with Close-Code and Close-Reason). Others get ERR BLIP/404.
            """
    )

    @Option(help: "Address to listen on.") var host = "127.0.0.1"
    @Option(help: "Port to listen on (0 picks a free one).") var port = 4985
    @Option(help: "Serve only this URL path, or paths matching a pattern such as /{db}/_blipsync (default: any path).")
    var path: String?
    @Option(help: "Subprotocols spoken, comma-separated, in preference order.")
    var protocols = BLIPSubprotocol.serverDefaults.joined(separator: ",")
    @Option(help: "PEM certificate chain for wss://.") var tlsCert: String?
    @Option(help: "PEM private key for wss://.") var tlsKey: String?
    @Option(help: "Require a client certificate signed by a CA in this PEM file (mutual TLS; needs --tls-cert).")
    var tlsRequireClientCert: String?
    @Option(help: "'seed' also serves the 2013 seed dialect to clients offering no subprotocol.")
    var dialect: DialectOption?
    @Option(help: "Write every connection's frames under this folder.") var capture: String?
    @Option(help: "Largest WebSocket message accepted, in bytes.") var maxMessageSize = 1 << 20
    @Option(help: "Largest BLIP message body accepted, in bytes (streamed bodies; whole ones also stop at the budget).")
    var maxIncomingMessageSize = BLIPConnection.Configuration().maximumIncomingMessageSize
    @Option(help: "Bytes a client may make one connection hold before it is held back (the hard limit is twice this).")
    var incomingBufferBudget = BLIPConnection.Configuration().incomingBufferBudget
    @Option(
        help: ArgumentHelp(
            "What all connections together may make the server hold: bytes, a percentage of physical memory (25%), or unlimited. Past it, the connections holding the most are slowed first and new upgrades get 503.",
            valueName: "bytes|percent|unlimited"
        )
    )
    var serverBufferBudget = "25%"
    @Option(help: "Refuse connections beyond this many open at once (default: no limit).") var maxConnections: Int?
    @Option(help: "Close connections not upgraded to WebSocket within this many seconds.")
    var handshakeTimeout = 10.0
    @Option(
        name: .customLong("require-basic"),
        help: ArgumentHelp(
            "Refuse upgrades (401) without these HTTP Basic credentials; the user name becomes the identity.",
            valueName: "user:password"
        )
    )
    var requireBasic: String?
    @Option(
        name: .customLong("session-token"),
        help: ArgumentHelp(
            "Admit one connection that offers this one-time session token as the subprotocol entry SyncGatewaySession_<token>, as browsers do for Sync Gateway 3.3+ (repeatable; other connections need --require-basic credentials, or get 401).",
            valueName: "token"
        )
    )
    var sessionTokens: [String] = []
    @Flag(help: "Make every connection a pure echo endpoint, no BLIP (for WebSocket conformance tests).")
    var echoOnly = false
    @Flag(help: "Use a fixed 128 000-byte send window instead of the adaptive one.") var fixedWindow = false
    @Option(help: "Deflate level for compressed data, 0 (off) to 9.") var compressionLevel: Int32?
    @Option(help: "On SIGTERM or SIGINT, how many seconds connections get to finish what is in flight before closing.")
    var drainTimeout = 10.0
    @Option(
        name: .customLong("static"),
        help: ArgumentHelp(
            "Serve this folder's files (and the browser client at /_blip/blip.js) to plain HTTP requests on the same port.",
            valueName: "dir"
        )
    )
    var staticDirectory: String?
    @Flag(help: "Serve the --static files to other machines too (default: to this machine only).")
    var staticRemote = false
    @Option(
        name: .customLong("allow-origin"),
        help: ArgumentHelp(
            "Also accept connections from web pages of this origin: https://app.example.com, a host pattern such as *.example.com, or * for every site (repeatable; default: only the server's own pages, and clients that are not browsers).",
            valueName: "origin"
        )
    )
    var allowedOrigins: [String] = []
    @Flag(help: "Log every message.") var verbose = false

    func validate() throws {
        if !(0...65_535).contains(self.port) { throw ValidationError("--port takes 0 to 65535, not \(self.port)") }
        if (self.tlsCert == nil) != (self.tlsKey == nil) {
            throw ValidationError("--tls-cert and --tls-key go together")
        }
        if self.tlsRequireClientCert != nil && self.tlsCert == nil {
            throw ValidationError("--tls-require-client-cert needs --tls-cert and --tls-key")
        }
        if let level = self.compressionLevel, !(0...9).contains(level) {
            throw ValidationError("--compression-level is 0 to 9")
        }
        if self.maxIncomingMessageSize <= 0 || self.incomingBufferBudget <= 0 {
            throw ValidationError("--max-incoming-message-size and --incoming-buffer-budget must be positive")
        }
        if let credentials = self.requireBasic, BasicAuthentication(credentials) == nil {
            throw ValidationError("--require-basic is user:password, with a non-empty user name and no colon in it")
        }
        if self.staticRemote && self.staticDirectory == nil {
            throw ValidationError("--static-remote needs --static")
        }
        if let limit = self.maxConnections, limit < 1 { throw ValidationError("--max-connections is at least 1") }
        if Self.serverBufferBudget(self.serverBufferBudget) == nil {
            throw ValidationError(
                "--server-buffer-budget is a number of bytes, a percentage such as 25%, or unlimited; not '\(self.serverBufferBudget)'"
            )
        }
        if !(self.drainTimeout >= 0 && self.drainTimeout <= 86_400) {
            throw ValidationError("--drain-timeout is 0 to 86 400 seconds")
        }
        if !(self.handshakeTimeout > 0 && self.handshakeTimeout <= 86_400) {
            throw ValidationError("--handshake-timeout is more than 0 and at most 86 400 seconds")
        }
    }

    func run() async throws {
        var logger = Logger(label: "blip.serve")
        logger.logLevel = self.verbose ? .debug : .info
        var configuration = BLIPWebSocketServer.Configuration()
        configuration.host = self.host
        configuration.port = self.port
        configuration.path = self.path
        configuration.subprotocols = self.protocols.split(separator: ",").map { String($0) }
        configuration.acceptsSeedDialect = self.dialect?.isSeed ?? false
        configuration.captureDirectory = self.capture
        configuration.maximumMessageSize = self.maxMessageSize
        configuration.maximumConnections = self.maxConnections
        configuration.handshakeTimeout = .nanoseconds(Int64(self.handshakeTimeout * 1e9))
        configuration.drainTimeout = .nanoseconds(Int64(self.drainTimeout * 1e9))
        configuration.rawEndpoint = self.echoOnly ? .always : .forSubprotocol(BLIPRawWebSocket.benchmarkSubprotocol)
        configuration.rawEndpointMode = self.echoOnly ? .echo : .benchmark
        let profiles = StandardProfiles()
        // Requests to unknown profiles: answered ERR BLIP/404 by the connection, and counted (`stats`).
        configuration.connection.unhandledRequestObserver = { count in
            profiles.counters.withLockedValue { $0.unhandled += count }
        }
        configuration.connection.maximumIncomingMessageSize = self.maxIncomingMessageSize
        configuration.connection.incomingBufferBudget = self.incomingBufferBudget
        configuration.serverBufferBudget = Self.serverBufferBudget(self.serverBufferBudget) ?? .unlimited
        configuration.connection.incomingBufferHardLimit = 2 * self.incomingBufferBudget
        if self.fixedWindow { configuration.connection.sendWindow = .fixed(128_000) }
        configuration.connection.compressionLevel = self.compressionLevel
        if let certificate = self.tlsCert, let key = self.tlsKey {
            configuration.tls = .init(certificateChainPath: certificate, privateKeyPath: key)
            if let authority = self.tlsRequireClientCert {
                configuration.tls?.clientCertificates = .required(trustRootsPath: authority)
            }
        }
        if let directory = self.staticDirectory {
            configuration.staticFiles = BLIPStaticFiles(directory: directory, servesRemoteClients: self.staticRemote)
        }
        configuration.allowedOrigins = self.allowedOrigins
        var router = BLIPRouter()
        router.register(profiles)
        let server: BLIPWebSocketServer
        do {
            server = try await BLIPWebSocketServer.bind(
                configuration: configuration,
                router: router,
                logger: logger,
                upgradeHandler: ServeAuthentication.upgradeHandler(
                    basic: self.requireBasic.flatMap(BasicAuthentication.init),
                    tokens: self.sessionTokens.isEmpty ? nil : SessionTokens(self.sessionTokens)
                )
            )
        } catch let error where ToolFailure.isListenFailure(error) {
            throw ToolFailure.cannotListen(on: self.host, port: self.port, error)
        }
        let scheme = self.tlsCert == nil ? "ws" : "wss"
        // Scripts (and `blip bench --self`) read this line to learn the port.
        print("blip: listening on \(scheme)://\(self.host):\(server.port)\(self.path ?? "/")")
        if self.staticDirectory != nil {
            print("blip: serving files at \(self.tlsCert == nil ? "http" : "https")://\(self.host):\(server.port)/")
        }
        fflush(nil)

        let connectionLogger = logger
        let observer = BLIPWebSocketServer.ConnectionObserver(
            opened: { accepted in
                connectionLogger.info(
                    "connection",
                    metadata: [
                        "remote": "\(accepted.remoteAddress)",
                        "subprotocol": "\(accepted.subprotocol ?? "none")",
                        "path": "\(accepted.path)",
                        "identity": "\(accepted.connection.identity.map { "\($0)" } ?? "none")",
                        "user_agent": "\(accepted.upgradeRequest.userAgent ?? "none")",
                    ]
                )
            },
            closed: { accepted in
                let statistics = accepted.connection.statistics
                connectionLogger.info(
                    "closed",
                    metadata: [
                        "remote": "\(accepted.remoteAddress)",
                        "frames_in": "\(statistics.framesReceived)", "frames_out": "\(statistics.framesSent)",
                        "bytes_in": "\(statistics.bytesReceived)", "bytes_out": "\(statistics.bytesSent)",
                        "send_window": "\(statistics.sendWindow)",
                    ]
                )
            }
        )
        let serving = Serving(server: server, observer: observer)
        // SIGTERM and SIGINT shut down gracefully: no new connections, in-flight requests finish (up to
        // --drain-timeout), then each connection closes with 1001.
        let group = ServiceGroup(
            configuration: ServiceGroupConfiguration(
                services: [.init(service: serving)],
                gracefulShutdownSignals: [.sigterm, .sigint],
                logger: logger
            )
        )
        try await group.run()
        logger.info("stopped")
    }

    /// `--server-buffer-budget`: bytes (> 0), a percentage of physical memory (0-100%), or `unlimited`.
    static func serverBufferBudget(_ text: String) -> ServerBufferBudget? {
        if text == "unlimited" { return .unlimited }
        if text.hasSuffix("%") {
            guard let percent = Double(text.dropLast()), percent > 0, percent <= 100 else { return nil }
            return .fractionOfPhysicalMemory(percent / 100)
        }
        guard let bytes = Int(text), bytes > 0 else { return nil }
        return .bytes(bytes)
    }

    /// The server with the tool's per-connection logging, as the one service of its group.
    private struct Serving: Service {
        let server: BLIPWebSocketServer
        let observer: BLIPWebSocketServer.ConnectionObserver

        func run() async {
            await self.server.run(observing: self.observer)
        }
    }
}
