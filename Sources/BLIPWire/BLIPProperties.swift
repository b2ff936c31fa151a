/// One property of a message: a name and a value, both UTF-8 strings.
public struct BLIPProperty: Hashable, Sendable {
    public var name: String
    public var value: String

    public init(name: String, value: String) {
        self.name = name
        self.value = value
    }
}

/// The properties of a message, like HTTP headers, kept in the order they were added (the order
/// they travel in on the wire). Names are unique: setting an existing name replaces its value in place.
public struct BLIPProperties: Hashable, Sendable, RandomAccessCollection, ExpressibleByDictionaryLiteral,
    CustomStringConvertible
{
    public static let profileName = "Profile"
    public static let errorDomainName = "Error-Domain"
    public static let errorCodeName = "Error-Code"
    public static let contentTypeName = "Content-Type"

    private var storage: [BLIPProperty]

    public init() {
        self.storage = []
    }

    /// Properties in the given order; a repeated name keeps its first position and its last value.
    public init(_ properties: some Sequence<(String, String)>) {
        self.storage = []
        // A name index only pays for long lists; short ones (nearly all) are scanned.
        var positions: [String: Int]?
        for (name, value) in properties {
            if positions == nil && self.storage.count >= 16 {
                positions = Dictionary(uniqueKeysWithValues: self.storage.enumerated().map { ($1.name, $0) })
            }
            if positions != nil {
                if let index = positions![name] {
                    self.storage[index].value = value
                } else {
                    positions![name] = self.storage.count
                    self.storage.append(BLIPProperty(name: name, value: value))
                }
            } else {
                self[name] = value
            }
        }
    }

    public init(dictionaryLiteral elements: (String, String)...) {
        self.init(elements)
    }

    /// Builds from pairs already known to have unique names (the property decoder checks that).
    init(uniqueProperties: [BLIPProperty]) {
        self.storage = uniqueProperties
    }

    public var startIndex: Int { self.storage.startIndex }
    public var endIndex: Int { self.storage.endIndex }
    public subscript(position: Int) -> BLIPProperty { self.storage[position] }

    /// The value of the property `name`; setting `nil` removes it.
    public subscript(name: String) -> String? {
        get {
            self.storage.first(where: { $0.name == name })?.value
        }
        set {
            let existing = self.storage.firstIndex(where: { $0.name == name })
            switch (existing, newValue) {
            case (let index?, let value?): self.storage[index].value = value
            case (let index?, nil): self.storage.remove(at: index)
            case (nil, let value?): self.storage.append(BLIPProperty(name: name, value: value))
            case (nil, nil): break
            }
        }
    }

    /// The `Profile` property, which names the purpose of a request.
    public var profile: String? {
        get { self[Self.profileName] }
        set { self[Self.profileName] = newValue }
    }

    public var description: String {
        "[" + self.storage.map { "\($0.name): \($0.value)" }.joined(separator: ", ") + "]"
    }
}
