public import BLIPWire
public import NIOCore

/// An error reply (ERR), as it crosses the wire: a domain, a code, a message (the body) and any other
/// properties. Thrown by `sendRequest` when the peer answers with ERR; thrown by a handler (or given to
/// `respond(throwing:)`) to answer with one. Two errors are equal when their domain and code are.
public struct BLIPError: Error, Sendable, Hashable, CustomStringConvertible {
    /// An open set of domains; "BLIP" is the protocol's own (and the default when a reply names none).
    public struct Domain: RawRepresentable, Hashable, Sendable, ExpressibleByStringLiteral, CustomStringConvertible {
        public var rawValue: String
        public init(rawValue: String) { self.rawValue = rawValue }
        public init(stringLiteral value: String) { self.rawValue = value }
        public var description: String { self.rawValue }

        public static let blip: Domain = "BLIP"
        /// Sync Gateway reports replication errors in this domain, with HTTP statuses.
        public static let http: Domain = "HTTP"
    }

    /// An open set of codes over the wire integer; the BLIP domain reuses HTTP status numbers.
    public struct Code: RawRepresentable, Hashable, Sendable, ExpressibleByIntegerLiteral, CustomStringConvertible {
        public var rawValue: Int32
        public init(rawValue: Int32) { self.rawValue = rawValue }
        public init(integerLiteral value: Int32) { self.rawValue = value }
        public var description: String { String(self.rawValue) }

        public static let badRequest: Code = 400
        public static let forbidden: Code = 403
        public static let notFound: Code = 404
        public static let payloadTooLarge: Code = 413
        public static let badRange: Code = 416
        /// A reply that could not be encoded (a property with NUL, a block over the limit).
        public static let internalError: Code = 500
        public static let handlerFailed: Code = 501
        /// The connection was too busy to take the request (its handlers and buffers were full).
        public static let busy: Code = 503
        public static let unspecified: Code = 599
    }

    public var domain: Domain
    public var code: Code
    /// The error's text (the ERR message's body).
    public var message: String
    /// Properties besides `Error-Domain` and `Error-Code`, sent and received.
    public var properties: BLIPProperties

    public init(domain: Domain = .blip, code: Code, message: String = "", properties: BLIPProperties = [:]) {
        self.domain = domain
        self.code = code
        self.message = message
        self.properties = properties
    }

    public static func == (lhs: BLIPError, rhs: BLIPError) -> Bool {
        lhs.domain == rhs.domain && lhs.code == rhs.code
    }

    public func hash(into hasher: inout Hasher) {
        hasher.combine(self.domain)
        hasher.combine(self.code)
    }

    public var description: String {
        "BLIPError(\(self.domain)/\(self.code)\(self.message.isEmpty ? "" : ": \(self.message)"))"
    }

    // MARK: - Wire form

    /// Reads an ERR message. A missing domain is "BLIP"; a missing, zero or malformed code is 599, as the
    /// Cocoa implementation reports it.
    public init(errorReplyProperties properties: BLIPProperties, body: ByteBuffer) {
        var extra = properties
        let domain = extra[BLIPProperties.errorDomainName]
        let code = extra[BLIPProperties.errorCodeName].flatMap { Int32($0) }
        extra[BLIPProperties.errorDomainName] = nil
        extra[BLIPProperties.errorCodeName] = nil
        self.init(
            domain: domain.map(Domain.init(rawValue:)) ?? .blip,
            code: code.flatMap { $0 == 0 ? nil : Code(rawValue: $0) } ?? .unspecified,
            message: String(buffer: body),
            properties: extra
        )
    }

    /// The properties of the ERR message: `Error-Domain`, `Error-Code` (in that order, as LiteCore writes
    /// them), then the others.
    public var errorReplyProperties: BLIPProperties {
        var properties: BLIPProperties = [
            BLIPProperties.errorDomainName: self.domain.rawValue,
            BLIPProperties.errorCodeName: String(self.code.rawValue),
        ]
        for property in self.properties where properties[property.name] == nil {
            properties[property.name] = property.value
        }
        return properties
    }
}

/// An error a handler throws that knows which ERR reply it should become (otherwise BLIP/501).
public protocol BLIPErrorConvertible: Error {
    var blipError: BLIPError { get }
}
