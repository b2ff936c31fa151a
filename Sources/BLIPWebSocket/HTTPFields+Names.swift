@_exported public import struct HTTPTypes.HTTPField
// Header fields are swift-http-types' `HTTPFields` everywhere in the public API (client, server, the
// Hummingbird mount); these two come with `import BLIPWebSocket`.
@_exported public import struct HTTPTypes.HTTPFields

/// The package's code names fields by their text, as they appear on the wire and in the handshake rules:
/// `HTTPFields` takes an `HTTPField.Name`, which a name that is not an HTTP token cannot be. Such a name
/// (never sent by a conforming peer, and refused by NIO's parser) matches nothing and is not added.
extension HTTPFields {
    package typealias Pairs = [(String, String)]

    /// Fields from name-value pairs, in the order given.
    package init(_ pairs: Pairs) {
        self.init()
        for (name, value) in pairs {
            self.add(name: name, value: value)
        }
    }

    /// Every value of the fields called `name`, in order.
    package subscript(_ name: String) -> [String] {
        HTTPField.Name(name).map { self[values: $0] } ?? []
    }

    /// The first value of the fields called `name`.
    package func first(_ name: String) -> String? {
        self[name].first
    }

    package func contains(_ name: String) -> Bool {
        HTTPField.Name(name).map { self.contains($0) } ?? false
    }

    /// Adds a field after the others (a repeated name adds a value, it does not replace one).
    package mutating func add(name: String, value: String) {
        guard let name = HTTPField.Name(name) else { return }
        self.append(HTTPField(name: name, value: value))
    }

    package mutating func remove(_ name: String) {
        guard let name = HTTPField.Name(name) else { return }
        self[values: name] = []
    }

    /// The cookies of the `Cookie` fields (RFC 6265 5.4), in order: each `name=value` pair without the
    /// spaces around it.
    package var cookies: [Substring] {
        self["Cookie"].flatMap { $0.split(separator: ";") }
            .map { pair in
                let start = pair.drop(while: \.isWhitespace)
                return start[..<(start.lastIndex { !$0.isWhitespace }.map(start.index(after:)) ?? start.startIndex)]
            }
            .filter { !$0.isEmpty }
    }

    /// Each field as its name as sent and its value.
    package var pairs: Pairs { self.map { ($0.name.rawName, $0.value) } }
}
