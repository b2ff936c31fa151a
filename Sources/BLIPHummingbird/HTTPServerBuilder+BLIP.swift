public import Hummingbird
public import HummingbirdCore

extension HTTPServerBuilder {
    /// HTTP/1.1 with BLIP upgrades: `blipRouter` decides WebSocket upgrade requests (its `blip` routes
    /// accept them; its middleware can refuse them), the application's router answers everything else.
    ///
    /// ```swift
    /// let router = Router(context: BasicBLIPRequestContext.self)
    /// router.get("/health") { _, _ in "ok" }
    /// router.blip("/{db}/_blipsync", router: blipRouter)
    /// let app = Application(router: router, server: .http1BLIPUpgrade(blipRouter: router))
    /// ```
    public static func http1BLIPUpgrade<BLIPResponderBuilder: HTTPResponderBuilder>(
        blipRouter: BLIPResponderBuilder,
        configuration: HTTP1BLIPUpgradeChannel.Configuration = .init()
    ) -> HTTPServerBuilder where BLIPResponderBuilder.Responder.Context: BLIPUpgradeRequestContext {
        let blipResponder = blipRouter.buildResponder()
        return HTTPServerBuilder { responder in
            HTTP1BLIPUpgradeChannel(responder: responder, blipResponder: blipResponder, configuration: configuration)
        }
    }
}
