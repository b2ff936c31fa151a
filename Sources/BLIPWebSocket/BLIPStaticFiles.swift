/// Plain HTTP files served on the same port as a ``BLIPWebSocketServer``'s BLIP endpoint: the browser
/// client module (``BLIPBrowserClient``) and, optionally, an application's own page and assets from a
/// directory, as the local servers inside hybrid apps do for their web half.
///
/// A `GET` or `HEAD` request that is not a WebSocket upgrade gets the file its path names; directories give
/// their `index.html`. Nothing outside the directory can be named: `..` and `.` segments, hidden names
/// (`.git`), encoded slashes, backslashes and NULs are refused, and a symbolic link is followed only when
/// its target is inside the directory too. Files are sent in chunks, never held whole.
public struct BLIPStaticFiles: Sendable, Hashable {
    /// The folder whose files are served (nil: only the browser client module).
    public var directory: String?
    /// Serve the browser client at ``BLIPBrowserClient/modulePath`` (and its TypeScript declarations).
    public var servesBrowserClient = true
    /// Serve clients that are not on this machine. Off by default: the files of a local bridge are for
    /// the app's own web view, and a server bound to a public address should not hand them to the network
    /// by accident. Requests from other addresses get 403.
    public var servesRemoteClients = false

    public init(directory: String? = nil, servesBrowserClient: Bool = true, servesRemoteClients: Bool = false) {
        self.directory = directory
        self.servesBrowserClient = servesBrowserClient
        self.servesRemoteClients = servesRemoteClients
    }
}

extension BLIPStaticFiles {
    /// ``directory`` is not a folder that can be read; thrown when the server binds.
    public struct NotADirectory: Error, Sendable, CustomStringConvertible {
        public var path: String
        public var description: String { "static files: \(self.path) is not a readable directory" }
    }
}
