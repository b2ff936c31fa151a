extension BLIPConnection {
    /// What a request whose time ran out fails with (see ConnectionCore+Deadlines).
    static func timedOut(_ request: BLIPRequest, after timeout: Duration) -> BLIPConnectionError {
        BLIPConnectionError(
            .timedOut,
            "no reply to \(request.profile.map { "'\($0)'" } ?? "the request") within \(timeout)"
        )
    }
}
