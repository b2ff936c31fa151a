package import BLIPWebSocket
internal import NIOCore

/// An HTTP/1.1 request or response head as it crossed the proxy: the start line and the header fields in
/// their order and spelling. The proxy forwards heads as bytes (a re-encoding codec would change what the
/// peers see), so it only needs to find where a head ends and read a few fields out of it.
package struct RelayedHTTPHead: Sendable, Hashable, CustomStringConvertible {
    /// `GET /path HTTP/1.1` or `HTTP/1.1 101 Switching Protocols`.
    package var startLine: String
    package var fields: HTTPFields

    /// The response's status code (nil for a request or an unreadable status line).
    package var status: Int? {
        let parts = self.startLine.split(separator: " ", maxSplits: 2)
        guard parts.count >= 2, parts[0].hasPrefix("HTTP/") else { return nil }
        return Int(parts[1])
    }

    /// The request target of a request line.
    package var target: String? {
        let parts = self.startLine.split(separator: " ", maxSplits: 2)
        guard parts.count == 3, !parts[0].hasPrefix("HTTP/") else { return nil }
        return String(parts[1])
    }

    /// The first value of a field, by case-insensitive name.
    package subscript(name: String) -> String? {
        self.fields.first(name)
    }

    /// The head with the values of the named fields (case-insensitive) replaced by `(redacted)`.
    package func redacting(_ names: Set<String>) -> RelayedHTTPHead {
        self.replacingValues(of: names, with: "(redacted)")
    }

    /// The head with the value of each field named in `names` (case-insensitive) replaced in place.
    func replacingValues(of names: Set<String>, with value: String) -> RelayedHTTPHead {
        let lowercased = Set(names.map { $0.lowercased() })
        var copy = self
        copy.fields = HTTPFields(
            self.fields.map { field in
                var field = field
                if lowercased.contains(field.name.canonicalName) { field.value = value }
                return field
            }
        )
        return copy
    }

    /// The head as text, CRLF line ends and the blank line included.
    package var description: String {
        ([self.startLine] + self.fields.map { "\($0.name): \($0.value)" }).joined(separator: "\r\n") + "\r\n\r\n"
    }

    /// Where a head ends in `buffer`: the head and its length in bytes, or nil while its blank line has not
    /// arrived. Throws when `limit` bytes arrive without one, or the head is not HTTP.
    static func parse(_ buffer: ByteBuffer, limit: Int) throws(RelayedHTTPHeadError) -> (Self, length: Int)? {
        let bytes = buffer.readableBytesView
        var lineStart = bytes.startIndex
        var lines: [Substring] = []
        var index = bytes.startIndex
        while index < bytes.endIndex {
            if bytes[index] == UInt8(ascii: "\n") {
                var end = index
                if end > lineStart && bytes[end - 1] == UInt8(ascii: "\r") { end -= 1 }
                let line = Substring(String(decoding: bytes[lineStart..<end], as: UTF8.self))
                if line.isEmpty {
                    guard let startLine = lines.first else { throw RelayedHTTPHeadError("an empty start line") }
                    var fields = HTTPFields()
                    for field in lines.dropFirst() {
                        guard let colon = field.firstIndex(of: ":") else {
                            throw RelayedHTTPHeadError("a header line without a colon")
                        }
                        fields.add(
                            name: String(field[..<colon]),
                            value: String(field[field.index(after: colon)...].drop { $0 == " " || $0 == "\t" })
                        )
                    }
                    return (Self(startLine: String(startLine), fields: fields), index + 1 - bytes.startIndex)
                }
                lines.append(line)
                lineStart = index + 1
            }
            index += 1
            if index - bytes.startIndex > limit { throw RelayedHTTPHeadError("no end of the head in \(limit) bytes") }
        }
        if bytes.count > limit { throw RelayedHTTPHeadError("no end of the head in \(limit) bytes") }
        return nil
    }
}

/// A head the proxy cannot read.
struct RelayedHTTPHeadError: Error, CustomStringConvertible {
    var description: String

    init(_ description: String) {
        self.description = description
    }
}
