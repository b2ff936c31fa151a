/// HTTP header fields as they were sent: in order, names compared without regard to case, repeated names
/// kept (every `Set-Cookie` of a response, every `WWW-Authenticate` challenge).
///
/// The package's own type so that its public API does not tie applications to one HTTP library.
public struct BLIPHTTPFields: Sendable, Hashable, Sequence, ExpressibleByDictionaryLiteral,
    CustomStringConvertible
{
    public struct Field: Sendable, Hashable {
        public var name: String
        public var value: String

        public init(name: String, value: String) {
            self.name = name
            self.value = value
        }
    }

    public private(set) var fields: [Field]

    public init(_ fields: [Field] = []) {
        self.fields = fields
    }

    /// Fields from name-value pairs, in the order given.
    public init(_ pairs: [(String, String)]) {
        self.fields = pairs.map { Field(name: $0.0, value: $0.1) }
    }

    public init(dictionaryLiteral elements: (String, String)...) {
        self.init(elements)
    }

    /// Every value of the fields called `name`, in order.
    public subscript(name: String) -> [String] {
        self.fields.filter { Self.equalNames($0.name, name) }.map(\.value)
    }

    /// The first value of the fields called `name`.
    public func first(_ name: String) -> String? {
        self.fields.first { Self.equalNames($0.name, name) }?.value
    }

    public func contains(_ name: String) -> Bool {
        self.fields.contains { Self.equalNames($0.name, name) }
    }

    /// Adds a field after the others (a repeated name adds a value, it does not replace one).
    public mutating func add(name: String, value: String) {
        self.fields.append(Field(name: name, value: value))
    }

    /// Replaces every field called `name` with one holding `value`.
    public mutating func replaceOrAdd(name: String, value: String) {
        self.remove(name)
        self.add(name: name, value: value)
    }

    public mutating func remove(_ name: String) {
        self.fields.removeAll { Self.equalNames($0.name, name) }
    }

    public var count: Int { self.fields.count }
    public var isEmpty: Bool { self.fields.isEmpty }

    public func makeIterator() -> IndexingIterator<[Field]> {
        self.fields.makeIterator()
    }

    public var description: String {
        self.fields.map { "\($0.name): \($0.value)" }.joined(separator: "\n")
    }

    private static func equalNames(_ a: String, _ b: String) -> Bool {
        a.utf8.count == b.utf8.count && a.lowercased() == b.lowercased()
    }
}
