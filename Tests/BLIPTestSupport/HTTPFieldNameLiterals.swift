public import HTTPTypes

/// Header names written as text in tests (`["Cookie": "a=b"]`, `headers: ["X-User": "alice"]`): a name that
/// is not an HTTP token is a mistake in the test itself, so it traps. Test support only: the library does
/// not declare it, so applications keep HTTPTypes' own choice.
// swift-format-ignore: AvoidRetroactiveConformances
extension HTTPField.Name: @retroactive ExpressibleByStringLiteral {
    public init(stringLiteral value: String) {
        guard let name = HTTPField.Name(value) else { preconditionFailure("not a header name: \(value)") }
        self = name
    }
}
