/// The JavaScript BLIP 3 client for web pages, an ES module with no dependencies, built into the library
/// so that the Swift side can hand the page the client that matches it.
///
/// `BLIPWebSocketServer` serves it at ``modulePath`` when ``BLIPStaticFiles/servesBrowserClient`` is
/// on; a server built on another framework can serve ``module`` itself.
///
/// ```js
/// import { BLIPConnection } from '/_blip/blip.js'
/// const blip = await BLIPConnection.connect(`ws://${location.host}/bridge`)
/// const reply = await blip.sendRequest({ profile: 'echo', body: 'hi' })
/// ```
public enum BLIPBrowserClient {
    /// Where `BLIPWebSocketServer` serves ``module``.
    public static let modulePath = "/_blip/blip.js"
    /// Where `BLIPWebSocketServer` serves ``typeDeclarations``.
    public static let typeDeclarationsPath = "/_blip/blip.d.ts"

    /// The module's source (UTF-8).
    public static var module: [UInt8] { PackageResources.blip_js }
    /// TypeScript declarations of the module, for editors.
    public static var typeDeclarations: [UInt8] { PackageResources.blip_d_ts }
}
