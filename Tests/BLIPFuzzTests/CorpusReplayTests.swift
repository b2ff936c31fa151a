import Foundation
import Testing

@testable import BLIPFuzz

/// Every corpus input and every saved regression goes through its fuzz target on each test run: a crash,
/// hang or broken invariant the fuzzer once found stays fixed.
@Suite("Fuzz corpus and regressions replay", .timeLimit(.minutes(5)))
struct CorpusReplayTests {
    static let fixtures = URL(fileURLWithPath: #filePath)
        .deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        .appendingPathComponent("Fixtures/fuzz")

    @Test("seed corpus and regressions replay cleanly", arguments: FuzzTarget.allCases)
    func replay(target: FuzzTarget) throws {
        var count = 0
        for folder in ["corpus", "regressions"] {
            let path = Self.fixtures.appendingPathComponent("\(folder)/\(target.rawValue)").path
            for file in CorpusFiles.list(path) {
                count += 1
                let failure = CorpusFiles.replay(file, through: target)
                #expect(failure == nil, "\(file): \(failure ?? "")")
            }
        }
        #expect(count > 0, "no inputs for \(target.rawValue)")
    }
}
