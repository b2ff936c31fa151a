import Foundation
import Testing

/// The code ReadmeExampleTests runs is the README's, line for line.
@Suite("The README's example is the code the tests run")
struct ReadmeTextTests {
    @Test("ReadmeExampleTests runs the README's code, line for line, with its imports only")
    func matchesTheReadme() throws {
        let here = URL(fileURLWithPath: #filePath)
        let source = try String(
            contentsOf: here.deletingLastPathComponent().appendingPathComponent("ReadmeExampleTests.swift"),
            encoding: .utf8
        )
        let readme = try String(
            contentsOf: here.deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
                .appendingPathComponent("README.md"),
            encoding: .utf8
        )
        let tested = try #require(Self.between("        // README begin\n", and: "        // README end", in: source))
            .split(separator: "\n", omittingEmptySubsequences: false)
            .map { $0.hasPrefix("        ") ? String($0.dropFirst(8)) : String($0) }
            .joined(separator: "\n")
        // The README's imports are these two only: no NIO, no Foundation.
        let printed = try #require(
            Self.between("```swift\nimport BLIP\nimport BLIPWebSocket\n\n", and: "```", in: readme)
        )
        #expect(tested == printed)
        let imports = source.split(separator: "\n").filter { $0.hasPrefix("import ") }
        #expect(imports == ["import BLIP", "import BLIPWebSocket", "import Testing"])
    }

    /// The text after the first `start` and before the next `end`.
    static func between(_ start: String, and end: String, in text: String) -> String? {
        guard let from = text.range(of: start)?.upperBound, let to = text[from...].range(of: end)?.lowerBound else {
            return nil
        }
        return String(text[from..<to])
    }
}
