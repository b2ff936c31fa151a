internal import BLIP
public import Hummingbird
internal import NIOConcurrencyHelpers

/// A Hummingbird request context that can carry a BLIP upgrade from the route that accepts it to the
/// channel that performs it. The router given to ``HummingbirdCore/HTTPServerBuilder/http1BLIPUpgrade(blipRouter:configuration:)``
/// uses such a context; add a ``BLIPUpgradeSlot`` to your own context type, or use
/// ``BasicBLIPRequestContext``.
public protocol BLIPUpgradeRequestContext: RequestContext, InitializableFromSource<ApplicationRequestContextSource> {
    /// Where a `router.blip(…)` route leaves the upgrade it accepted.
    var blipUpgrade: BLIPUpgradeSlot { get }
}

/// Holds the upgrade a `router.blip(…)` route accepted, for the channel to perform once the route (and
/// every middleware around it) has returned. A reference, so that copies of a context share it.
public final class BLIPUpgradeSlot: Sendable {
    private let accepted = NIOLockedValueBox<AcceptedUpgrade?>(nil)

    public init() {}

    var value: AcceptedUpgrade? {
        get { self.accepted.withLockedValue { $0 } }
        set { self.accepted.withLockedValue { $0 = newValue } }
    }
}

/// A request context with nothing but Hummingbird's own storage and the BLIP upgrade slot.
public struct BasicBLIPRequestContext: BLIPUpgradeRequestContext {
    public var coreContext: CoreRequestContextStorage
    public let blipUpgrade = BLIPUpgradeSlot()

    public init(source: ApplicationRequestContextSource) {
        self.coreContext = .init(source: source)
    }
}

/// What an accepting route decided, everything the channel needs to start the connection.
struct AcceptedUpgrade: Sendable {
    var dialect: BLIPDialect
    var subprotocol: String?
    var identity: (any Sendable)?
    var pathParameters: [String: String]
    var router: BLIPRouter
    var configuration: BLIPEndpointConfiguration
    var onConnection: (@Sendable (BLIPConnection) async throws -> Void)?
}
