import Foundation
import Testing

/// Every Swift sample in the DocC articles is code a test compiles and runs: each one appears, line for
/// line, between `// sample: <catalog>/<article> #<n>` and `// end sample` in this target's files (its
/// `import` lines are this target's imports). Samples still waiting for their test are listed in
/// `Pending.txt`; the list may only shrink (a listed sample that has its test fails, so does one missing
/// from both). Package manifest fragments (`.target(`, `.package(`) are not Swift code to run.
@Suite("DocC samples are compiled and run")
struct SampleCatalogueTests {
    static let here = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    static let root = here.deletingLastPathComponent().deletingLastPathComponent()

    /// Each sample of every article: "<catalog>/<article> #<n>" and its code without `import` lines.
    static func samples() throws -> [(key: String, code: String)] {
        var samples: [(String, String)] = []
        let sources = root.appendingPathComponent("Sources")
        for module in try FileManager.default.contentsOfDirectory(atPath: sources.path).sorted() {
            let catalog = sources.appendingPathComponent(module).appendingPathComponent("\(module).docc")
            guard let articles = try? FileManager.default.contentsOfDirectory(atPath: catalog.path) else { continue }
            for article in articles.sorted() where article.hasSuffix(".md") {
                let text = try String(contentsOf: catalog.appendingPathComponent(article), encoding: .utf8)
                var number = 0
                for block in text.components(separatedBy: "```swift\n").dropFirst() {
                    number += 1
                    guard let end = block.range(of: "```") else { continue }
                    let code = String(block[..<end.lowerBound])
                    if code.hasPrefix(".target(") || code.hasPrefix(".package(") { continue }
                    let lines = code.split(separator: "\n", omittingEmptySubsequences: false)
                        .filter { !$0.hasPrefix("import ") }
                    samples.append(
                        ("\(module).docc/\(article) #\(number)", Self.trimmed(lines.joined(separator: "\n")))
                    )
                }
            }
        }
        return samples
    }

    /// The marked regions of this target's files, dedented: from a line that is `// sample: KEY` to one
    /// that is `// end sample`.
    static func regions() throws -> [String: String] {
        var regions: [String: String] = [:]
        for file in try FileManager.default.contentsOfDirectory(atPath: here.path) where file.hasSuffix(".swift") {
            let text = try String(contentsOf: here.appendingPathComponent(file), encoding: .utf8)
            var key: String?
            var lines: [Substring] = []
            for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
                let content = line.drop { $0 == " " }
                if let open = key {
                    if content == "// end sample" {
                        let indent = lines.filter { !$0.isEmpty }.map { $0.prefix { $0 == " " }.count }.min() ?? 0
                        regions[open] = Self.trimmed(
                            lines.map { String($0.dropFirst(min(indent, $0.count))) }.joined(separator: "\n")
                        )
                        key = nil
                    } else {
                        lines.append(line)
                    }
                } else if content.hasPrefix("// sample: ") {
                    key = String(content.dropFirst("// sample: ".count))
                    lines = []
                }
            }
        }
        return regions
    }

    static func trimmed(_ text: String) -> String {
        text.trimmingCharacters(in: .newlines)
    }

    @Test("each article's sample is in a test, line for line, or on the shrinking pending list")
    func everySampleIsRun() throws {
        let samples = try Self.samples()
        let regions = try Self.regions()
        let pending = Set(
            try String(contentsOf: Self.here.appendingPathComponent("Pending.txt"), encoding: .utf8)
                .split(separator: "\n").map(String.init).filter { !$0.isEmpty && !$0.hasPrefix("#") }
        )
        #expect(samples.count >= 30, "the articles hold more samples than this found: \(samples.count)")
        for sample in samples {
            if let region = regions[sample.key] {
                #expect(region == sample.code, "\(sample.key) differs from its test:\n\(region)\n---\n\(sample.code)")
                #expect(!pending.contains(sample.key), "\(sample.key) has its test now: take it off Pending.txt")
            } else {
                #expect(pending.contains(sample.key), "\(sample.key) has no test and is not on Pending.txt")
            }
        }
        let keys = Set(samples.map(\.key))
        for key in regions.keys { #expect(keys.contains(key), "\(key) is no longer in the articles") }
        for key in pending { #expect(keys.contains(key), "Pending.txt names \(key), which no article has") }
    }
}
