import BLIP
import BLIPHummingbird
import BLIPTestSupport
import BLIPWebSocket
import Foundation
import HTTPTypes
import Hummingbird
import HummingbirdCore
import Logging
import NIOConcurrencyHelpers
import NIOCore
import NIOPosix
import ServiceLifecycle
import Testing

/// A request context with the user a middleware authenticated.
struct SyncContext: BLIPUpgradeRequestContext {
    var coreContext: CoreRequestContextStorage
    let blipUpgrade = BLIPUpgradeSlot()
    var user: String?

    init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
    }
}

/// Basic authentication for one user, alice:secret; anyone else gets a 401 with a challenge.
struct AliceOnly: RouterMiddleware {
    typealias Context = SyncContext

    // Hummingbird's requirement runs off the caller's actor; this module's default is the caller's.
    @concurrent
    func handle(
        _ request: Request,
        context: SyncContext,
        next: @concurrent (Request, SyncContext) async throws -> Response
    ) async throws -> Response {
        let expected = "Basic " + Data("alice:secret".utf8).base64EncodedString()
        guard request.headers[.authorization] == expected else {
            throw HTTPError(.unauthorized, headers: [.wwwAuthenticate: "Basic realm=\"sync\""], message: "who are you?")
        }
        var context = context
        context.user = "alice"
        return try await next(request, context)
    }
}

/// The identity the test endpoints give their connections.
struct SyncUser: Sendable, Equatable {
    var name: String
    var database: String
}

/// A Hummingbird application on a free loopback port, run in a `ServiceGroup` for the duration of `body`.
struct HummingbirdServer: Sendable {
    let port: Int
    let group: ServiceGroup

    func url(_ path: String) -> String { "ws://127.0.0.1:\(self.port)\(path)" }

    static func with<T: Sendable>(
        router: Router<SyncContext>,
        _ body: (HummingbirdServer) async throws -> T
    ) async throws -> T {
        let ports = AsyncStream.makeStream(of: Int.self)
        let app = Application(
            router: router,
            server: .http1BLIPUpgrade(blipRouter: router),
            configuration: ApplicationConfiguration(address: .hostname("127.0.0.1", port: 0)),
            onServerRunning: { channel in
                ports.continuation.yield(channel.localAddress?.port ?? 0)
                ports.continuation.finish()
            },
            logger: Logger(label: "test.hummingbird")
        )
        let group = ServiceGroup(
            configuration: .init(services: [app], gracefulShutdownSignals: [], logger: Logger(label: "test.group"))
        )
        let running = Task { try await group.run() }
        var iterator = ports.stream.makeAsyncIterator()
        guard let port = await iterator.next() else {
            running.cancel()
            throw CancellationError()
        }
        let server = HummingbirdServer(port: port, group: group)
        do {
            let result = try await body(server)
            await group.triggerGracefulShutdown()
            try await running.value
            return result
        } catch {
            running.cancel()
            _ = try? await running.value
            throw error
        }
    }
}

/// One HTTP/1.1 request on a new connection (`Connection: close`); the whole response as text.
func rawHTTP(port: Int, _ request: String) async throws -> String {
    let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
        .connect(host: "127.0.0.1", port: port) { channel in
            channel.eventLoop.makeCompletedFuture {
                try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
            }
        }
    return try await channel.executeThenClose { inbound, outbound in
        try await outbound.write(ByteBuffer(string: request))
        var response = ""
        for try await piece in inbound {
            response += String(buffer: piece)
            guard response.utf8.count < 1 << 20 else { break }
        }
        return response
    }
}

func clientConfiguration(
    subprotocols: [String] = BLIPSubprotocol.couchbaseMobileDefaults,
    user: String? = "alice",
    password: String = "secret"
) -> BLIPWebSocketClient.Configuration {
    var configuration = BLIPWebSocketClient.Configuration()
    configuration.subprotocols = subprotocols
    configuration.heartbeatInterval = nil
    if let user {
        let credentials = Data("\(user):\(password)".utf8).base64EncodedString()
        configuration.headers = ["Authorization": "Basic \(credentials)"]
    }
    return configuration
}
