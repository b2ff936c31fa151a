internal import Foundation

/// A server path such as `/{db}/_blipsync`: a segment written `{name}` matches any one non-empty segment
/// and captures it percent-decoded; every other segment must be equal as sent (still percent-encoded), so a
/// pattern without braces is an exact path.
struct PathPattern: Sendable, Hashable {
    private enum Segment: Sendable, Hashable {
        case literal(Substring)
        case parameter(String)
    }

    private let segments: [Segment]

    init(_ pattern: String) {
        self.segments = pattern.split(separator: "/", omittingEmptySubsequences: false).map { segment in
            if segment.count > 2, segment.first == "{", segment.last == "}" {
                return .parameter(String(segment.dropFirst().dropLast()))
            }
            return .literal(segment)
        }
    }

    /// The captured parameters, or nil when `path` (without its query) does not match. A segment that is
    /// not valid percent-encoded UTF-8 does not match a parameter.
    func match(_ path: String) -> [String: String]? {
        let parts = path.split(separator: "/", omittingEmptySubsequences: false)
        guard parts.count == self.segments.count else { return nil }
        var parameters: [String: String] = [:]
        for (segment, part) in zip(self.segments, parts) {
            switch segment {
            case .literal(let literal):
                guard part == literal else { return nil }
            case .parameter(let name):
                guard !part.isEmpty, let decoded = String(part).removingPercentEncoding, !decoded.isEmpty else {
                    return nil
                }
                parameters[name] = decoded
            }
        }
        return parameters
    }
}
