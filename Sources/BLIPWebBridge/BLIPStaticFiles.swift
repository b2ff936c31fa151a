public import BLIPWebSocket

/// Plain HTTP files served on the same port as a `BLIPWebSocketServer`'s BLIP endpoint: the browser
/// client module (``BLIPBrowserClient``) and, optionally, an application's own page and assets from a
/// directory, as the local servers inside hybrid apps do for their web half.
///
/// A `GET` or `HEAD` request that is not a WebSocket upgrade gets the file its path names; directories give
/// their `index.html`. Nothing outside the directory can be named: `..` and `.` segments, hidden names
/// (`.git`), encoded slashes, backslashes and NULs are refused, and a symbolic link is followed only when
/// its target is inside the directory too. Files are sent in chunks, never held whole.
public struct BLIPStaticFiles: Sendable, Hashable, PlainHTTPService {
    /// The folder whose files are served (nil: only the browser client module).
    public var directory: String?
    /// Serve the browser client at ``BLIPBrowserClient/modulePath`` (and its TypeScript declarations).
    public var servesBrowserClient = true
    /// Serve clients that are not on this machine. Off by default: the files of a local bridge are for
    /// the app's own web view, and a server bound to a public address should not hand them to the network
    /// by accident. Requests from other addresses get 403.
    ///
    /// Off, the `Host` a request names must be this machine too (`127.0.0.1`, `[::1]`, `localhost`), so
    /// that a web site that points its own name at 127.0.0.1 (DNS rebinding) gets 403 as well.
    public var servesRemoteClients = false
    /// Origins (`http://host:port`) besides the server's own whose pages may open BLIP connections.
    ///
    /// With static files on, an upgrade that carries an `Origin` (every browser sends one) is accepted
    /// only from the server's own pages or these; a page of any other site the user visits gets 403 and
    /// cannot reach the bridge. Clients that send no `Origin` (apps, Couchbase Lite, go-blip) are not
    /// affected. Files are not behind the server's upgrade handler: they go to any client allowed here.
    public var allowedOrigins: [String] = []
    /// How long one 64 KiB chunk of a file may take to be written before the client is given up on. The
    /// request itself must come within the server's handshake timeout; a file's body may take as long as
    /// its reader keeps reading.
    public var writeTimeout = Duration.seconds(10)

    public init(
        directory: String? = nil,
        servesBrowserClient: Bool = true,
        servesRemoteClients: Bool = false,
        allowedOrigins: [String] = []
    ) {
        self.directory = directory
        self.servesBrowserClient = servesBrowserClient
        self.servesRemoteClients = servesRemoteClients
        self.allowedOrigins = allowedOrigins
    }
}

extension BLIPStaticFiles {
    /// ``directory`` is not a folder (or is the file system's root); thrown when the server binds.
    public struct NotADirectory: Error, Sendable, CustomStringConvertible {
        public var path: String
        public var description: String { "static files: \(self.path) is not a directory" }
    }
}

extension BLIPStaticFiles {
    package func makeResponder() throws -> any PlainHTTPResponder { try StaticFileResponder(self) }
}

extension BLIPWebSocketServer.Configuration {
    /// Files served to plain HTTP requests on the same port (the browser client module, a web page and
    /// its assets); nil answers them 426, as a BLIP endpoint does.
    public var staticFiles: BLIPStaticFiles? {
        get { self.plainHTTP as? BLIPStaticFiles }
        set { self.plainHTTP = newValue }
    }
}
