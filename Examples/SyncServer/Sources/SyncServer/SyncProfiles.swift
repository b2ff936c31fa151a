import BLIP
import NIOCore

/// A few profiles shaped like Couchbase replication's: checkpoints, and documents by id and revision.
/// The database is the connection's, from its path; the store is in memory.
struct SyncProfiles {
    let store: DocumentStore

    var router: BLIPRouter {
        var router = BLIPRouter()
        let store = self.store
        router.register(profile: "getCheckpoint") { request, context in
            let session = try Self.session(context)
            let client = try Self.require("client", request)
            guard let rev = await store.checkpoint(session.database, client) else {
                throw BLIPError(domain: "HTTP", code: 404, message: "no checkpoint")
            }
            return BLIPResponse(properties: ["rev": rev])
        }
        router.register(profile: "setCheckpoint") { request, context in
            let session = try Self.session(context)
            let client = try Self.require("client", request)
            let rev = await store.setCheckpoint(session.database, client, body: request.body)
            return BLIPResponse(properties: ["rev": rev])
        }
        router.register(profile: "rev") { request, context in
            let session = try Self.session(context)
            let id = try Self.require("id", request)
            let rev = try Self.require("rev", request)
            await store.put(session.database, id: id, rev: rev, body: request.body)
            return BLIPResponse()
        }
        router.register(profile: "getRev") { request, context in
            let session = try Self.session(context)
            let id = try Self.require("id", request)
            guard let (rev, body) = await store.get(session.database, id: id) else {
                throw BLIPError(domain: "HTTP", code: 404, message: "missing")
            }
            return BLIPResponse(properties: ["rev": rev], body: body)
        }
        // For `blip bench` against this server, shaped as the standard test server's: echo needs no
        // `await`, so it runs where its request completes (no task); sink reads its body as it streams in.
        router.registerSynchronous(profile: "echo") { request, _ in BLIPResponse(body: request.body) }
        router.registerStreaming(profile: "sink") { request, _ in
            var count = 0
            for try await piece in request.body { count += piece.readableBytes }
            return BLIPResponse(properties: ["Count": "\(count)"])
        }
        return router
    }

    private static func session(_ context: BLIPRequestContext) throws -> SyncSession {
        guard let session = context.identity(as: SyncSession.self) else {
            throw BLIPError(domain: "HTTP", code: 401, message: "no session")
        }
        return session
    }

    private static func require(_ name: String, _ request: BLIPRequest) throws -> String {
        guard let value = request.properties[name] else {
            throw BLIPError(domain: "HTTP", code: 400, message: "missing property \(name)")
        }
        return value
    }
}

/// Checkpoints and documents per database, in memory.
actor DocumentStore {
    private var checkpoints: [String: (rev: Int, body: ByteBuffer)] = [:]
    private var documents: [String: [String: (rev: String, body: ByteBuffer)]] = [:]

    func checkpoint(_ database: String, _ client: String) -> String? {
        self.checkpoints["\(database)/\(client)"].map { "0-\($0.rev)" }
    }

    func setCheckpoint(_ database: String, _ client: String, body: ByteBuffer) -> String {
        let key = "\(database)/\(client)"
        let rev = (self.checkpoints[key]?.rev ?? 0) + 1
        self.checkpoints[key] = (rev, body)
        return "0-\(rev)"
    }

    func put(_ database: String, id: String, rev: String, body: ByteBuffer) {
        self.documents[database, default: [:]][id] = (rev, body)
    }

    func get(_ database: String, id: String) -> (String, ByteBuffer)? {
        self.documents[database]?[id].map { ($0.rev, $0.body) }
    }

    func count(in database: String) -> Int {
        self.documents[database]?.count ?? 0
    }
}
