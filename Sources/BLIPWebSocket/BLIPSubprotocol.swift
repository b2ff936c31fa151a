public import BLIPWire

/// WebSocket subprotocol names and how they choose the dialect (digest 7.1, 6.4).
public enum BLIPSubprotocol {
    /// The BLIP 3 prefix: every BLIP 3 subprotocol is `BLIP_3+<application>`.
    public static let blip3Prefix = "BLIP_3+"
    /// BLIP 2's subprotocol.
    public static let blip2 = "BLIP"
    /// The subprotocols Couchbase Lite 3 offers, most preferred first.
    public static let couchbaseMobileDefaults = ["BLIP_3+CBMobile_3", "BLIP_3+CBMobile_2"]
    /// The subprotocol of Couchbase Lite's replicator for databases with version vectors (Couchbase Lite 4,
    /// Sync Gateway 4): LiteCore requires it of such a database's peer. A client for one offers it alone,
    /// or first: `[BLIPSubprotocol.couchbaseMobile4] + BLIPSubprotocol.couchbaseMobileDefaults`.
    public static let couchbaseMobile4 = "BLIP_3+CBMobile_4"
    /// The prefix of the extra `Sec-WebSocket-Protocol` entry that carries a one-time session token
    /// (`SyncGatewaySession_<token>`): Sync Gateway 3.3+ takes it from browsers, which cannot set
    /// `Authorization` on a WebSocket. A server never chooses it: the 101 names the BLIP subprotocol only.
    public static let sessionTokenPrefix = "SyncGatewaySession_"

    /// What servers speak by default, most recent first: every Couchbase Mobile version and BLIP 2.
    public static let serverDefaults = [couchbaseMobile4] + couchbaseMobileDefaults + [blip2]

    /// `BLIP_3+<application>`, e.g. `BLIP_3+CBMobile_3`.
    public static func blip3(application: String) -> String {
        self.blip3Prefix + application
    }

    /// The dialect a negotiated subprotocol selects: `BLIP_3+<app>` is BLIP 3, `BLIP` is BLIP 2. Nothing
    /// else is BLIP (alpha names such as `BLIP_3a2`, the base name `BLIP_3` alone, other case).
    public static func dialect(for subprotocol: String) -> BLIPDialect? {
        if subprotocol == self.blip2 { return .blip2 }
        if subprotocol.hasPrefix(self.blip3Prefix) && subprotocol.count > self.blip3Prefix.count { return .blip3 }
        return nil
    }

    /// The values of `Sec-WebSocket-Protocol` header lines, split on commas and trimmed, in order.
    public static func parseOffers(_ headerValues: [String]) -> [String] {
        headerValues.flatMap { $0.split(separator: ",") }
            .map { $0.trimmingCharacters(in: " \t") }
            .filter { !$0.isEmpty }
    }

    /// The server's choice: the first of the client's offers that the server supports (the client's
    /// preference wins, as in go-blip); nil when none is supported.
    public static func choose(offered: [String], supported: [String]) -> String? {
        offered.first { supported.contains($0) }
    }
}

extension Substring {
    fileprivate func trimmingCharacters(in characters: String) -> String {
        var slice = self[...]
        while let first = slice.first, characters.contains(first) { slice = slice.dropFirst() }
        while let last = slice.last, characters.contains(last) { slice = slice.dropLast() }
        return String(slice)
    }
}
