internal import Foundation

/// The fuzz targets, by name. One executable holds them all; `BLIP_FUZZ_TARGET` picks one under libFuzzer.
enum FuzzTarget: String, CaseIterable {
    case frames
    case engine
    case properties
    case connection

    func run(_ data: UnsafeRawBufferPointer) throws(FuzzFailure) {
        switch self {
        case .frames: try FrameSequenceTarget.run(data)
        case .engine: try EngineTarget.run(data)
        case .properties: try PropertiesTarget.run(data)
        case .connection: try ConnectionPairTarget.run(data)
        }
    }

    static let selected: FuzzTarget = {
        let name = ProcessInfo.processInfo.environment["BLIP_FUZZ_TARGET"] ?? ""
        guard let target = FuzzTarget(rawValue: name) else {
            fatalError("set BLIP_FUZZ_TARGET to one of: \(allCases.map(\.rawValue).joined(separator: ", "))")
        }
        return target
    }()
}

/// libFuzzer's entry point. A broken invariant becomes a crash, which libFuzzer saves to replay.
@_cdecl("LLVMFuzzerTestOneInput")
public func blipFuzzTestOneInput(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = UnsafeRawBufferPointer(start: data, count: data == nil ? 0 : size)
    do {
        try FuzzTarget.selected.run(bytes)
    } catch {
        fatalError("\(FuzzTarget.selected.rawValue): \(error)")
    }
    return 0
}

#if !FUZZING
    /// In a normal build: replays files (or folders of them) through a target, so the targets and the
    /// corpus never rot. `BLIPFuzz <target> <file or folder>...`; exits 1 if any input breaks an invariant.
    @main
    enum ReplayCorpus {
        static func main() {
            let arguments = Array(CommandLine.arguments.dropFirst())
            guard let name = arguments.first, let target = FuzzTarget(rawValue: name), arguments.count > 1 else {
                print(
                    "usage: BLIPFuzz <\(FuzzTarget.allCases.map(\.rawValue).joined(separator: "|"))> <file or folder>..."
                )
                exit(2)
            }
            var failures = 0
            var count = 0
            for path in arguments.dropFirst() {
                for file in CorpusFiles.list(path) {
                    count += 1
                    if let failure = CorpusFiles.replay(file, through: target) {
                        failures += 1
                        print("FAILED \(file): \(failure)")
                    }
                }
            }
            print("\(target.rawValue): \(count) inputs replayed, \(failures) failed")
            exit(failures == 0 ? 0 : 1)
        }
    }
#endif

/// Corpus files on disk.
enum CorpusFiles {
    /// `path` itself if it is a file, else the files in the folder (not hidden), sorted.
    static func list(_ path: String) -> [String] {
        var isDirectory: ObjCBool = false
        guard FileManager.default.fileExists(atPath: path, isDirectory: &isDirectory) else { return [] }
        guard isDirectory.boolValue else { return [path] }
        let names = (try? FileManager.default.contentsOfDirectory(atPath: path)) ?? []
        return names.filter { !$0.hasPrefix(".") }.sorted().map { "\(path)/\($0)" }
    }

    /// Runs one file through `target`; returns what went wrong, if anything.
    static func replay(_ file: String, through target: FuzzTarget) -> String? {
        guard let data = FileManager.default.contents(atPath: file) else { return "unreadable" }
        let bytes = [UInt8](data)
        return bytes.withUnsafeBytes { bytes -> String? in
            do {
                try target.run(bytes)
                return nil
            } catch {
                return "\(error)"
            }
        }
    }
}
