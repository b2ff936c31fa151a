internal import ArgumentParser
internal import BLIPInspection
internal import BLIPWebSocket
internal import BLIPWire
internal import Foundation
internal import NIOCore

/// The dialect names on the command line.
enum DialectArgument: String, ExpressibleByArgument {
    case blip3, blip2, seed

    var dialect: BLIPDialect { BLIPDialect(rawValue: self.rawValue)! }
}

struct DecodeCommand: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "decode",
        abstract: "Decode BLIP frames: one line per frame and per completed message.",
        discussion: """
            Frames of one direction are decoded in order, so BLIP 3 checksums and the shared deflate stream \
            are followed across them. A folder with a manifest.json (the Fixtures capture format) decodes \
            both directions; a folder of fNNN-<c2s|s2c>-*.bin files is decoded per direction from the names; \
            files given one by one are one direction, in the order given. '-' reads hex frames, one per line, \
            from standard input. Exit status 1 if any frame is malformed.
            """
    )

    @Option(help: "Wire dialect (default: blip3, or what a capture's manifest says).") var dialect: DialectArgument?
    @Option(help: "Decode only this direction of a folder (c2s or s2c), or name the direction of the frames given.")
    var direction: String?
    @Option(name: .customLong("hex"), help: "A frame in hex (repeatable; decoded in order).") var hexFrames: [String] =
        []
    @Argument(help: "Frame files, a capture folder, or '-'.") var inputs: [String] = []
    @Flag(help: "Print everything as one JSON object.") var json = false

    func validate() throws {
        if self.inputs.isEmpty && self.hexFrames.isEmpty {
            throw ValidationError("give frame files, a folder, --hex or '-'")
        }
        if let direction = self.direction, direction != "c2s" && direction != "s2c" {
            throw ValidationError("--direction is c2s or s2c")
        }
    }

    func run() throws {
        let (dialect, directions) = try self.loadFrames()
        let results = directions.map { name, frames in Dissector(dialect: dialect, direction: name).decode(frames) }
        if self.json {
            let object: [String: Any] = ["dialect": dialect.rawValue, "directions": results.map(\.json)]
            let data = try JSONSerialization.data(
                withJSONObject: object,
                options: [.sortedKeys, .withoutEscapingSlashes]
            )
            print(String(decoding: data, as: UTF8.self))
        } else {
            for result in results {
                for line in result.lines { print(line) }
            }
        }
        if results.contains(where: { $0.error != nil }) { throw ExitCode(1) }
    }

    /// The frames to decode, per direction, in order.
    func loadFrames() throws -> (BLIPDialect, [(String, [(name: String, bytes: ByteBuffer)])]) {
        let label = self.direction ?? "frames"
        if !self.hexFrames.isEmpty {
            return (
                self.dialect?.dialect ?? .blip3,
                [(label, try self.hexFrames.enumerated().map { ("hex\($0)", try Self.hex($1)) })]
            )
        }
        if self.inputs == ["-"] {
            let text = String(decoding: FileHandle.standardInput.readDataToEndOfFile(), as: UTF8.self)
            let lines = text.split(whereSeparator: \.isNewline).map(String.init).filter { !$0.trimmed.isEmpty }
            return (
                self.dialect?.dialect ?? .blip3,
                [(label, try lines.enumerated().map { ("line\($0 + 1)", try Self.hex($1)) })]
            )
        }
        var isFolder: ObjCBool = false
        if self.inputs.count == 1, FileManager.default.fileExists(atPath: self.inputs[0], isDirectory: &isFolder),
            isFolder.boolValue
        {
            return try self.loadFolder(self.inputs[0])
        }
        let frames = try self.inputs.map { path in
            (URL(fileURLWithPath: path).lastPathComponent, ByteBuffer(bytes: try Self.readFrame(path)))
        }
        return (self.dialect?.dialect ?? .blip3, [(label, frames)])
    }

    /// A frame file's bytes; a missing or unreadable one is named in the failure.
    static func readFrame(_ path: String) throws -> Data {
        guard FileManager.default.fileExists(atPath: path) else { throw ToolError("cannot read \(path): no such file") }
        guard let data = FileManager.default.contents(atPath: path) else {
            throw ToolError("cannot read \(path): permission denied or not a file")
        }
        return data
    }

    /// A capture folder: one with a manifest.json listing scenarios (each its own connection, decoded
    /// per direction), or a folder of `fNNN-<c2s|s2c>-*.bin` files decoded per direction from the names.
    private func loadFolder(_ folder: String) throws -> (BLIPDialect, [(String, [(name: String, bytes: ByteBuffer)])]) {
        let base = URL(fileURLWithPath: folder)
        if let manifest = Self.manifest(at: base.appendingPathComponent("manifest.json")) {
            var directions: [(String, [(name: String, bytes: ByteBuffer)])] = []
            for scenario in manifest["scenarios"] as? [[String: Any]] ?? [] {
                guard let dir = scenario["dir"] as? String else { continue }
                for (direction, frames) in try self.loadFrameFiles(base.appendingPathComponent(dir)) {
                    directions.append(("\(dir)/\(direction)", frames))
                }
            }
            return (self.dialect?.dialect ?? Self.dialect(of: manifest) ?? .blip3, directions)
        }
        // A scenario folder of a capture set: the set's manifest names the dialect.
        let parent = Self.manifest(at: base.deletingLastPathComponent().appendingPathComponent("manifest.json"))
        return (self.dialect?.dialect ?? parent.flatMap(Self.dialect(of:)) ?? .blip3, try self.loadFrameFiles(base))
    }

    private func loadFrameFiles(_ folder: URL) throws -> [(String, [(name: String, bytes: ByteBuffer)])] {
        var names: [(direction: String, index: Int, name: String)] = []
        for file in try FileManager.default.contentsOfDirectory(atPath: folder.path) {
            let parts = file.split(separator: "-")
            guard file.hasSuffix(".bin"), parts.count >= 3, parts[0].hasPrefix("f"),
                let index = Int(parts[0].dropFirst()),
                parts[1] == "c2s" || parts[1] == "s2c"
            else { continue }
            names.append((String(parts[1]), index, file))
        }
        var directions: [(String, [(name: String, bytes: ByteBuffer)])] = []
        for direction in ["c2s", "s2c"] where self.direction == nil || self.direction == direction {
            let files = names.filter { $0.direction == direction }.sorted { $0.index < $1.index }
            guard !files.isEmpty else { continue }
            directions.append(
                (
                    direction,
                    try files.map {
                        ($0.name, ByteBuffer(bytes: try Data(contentsOf: folder.appendingPathComponent($0.name))))
                    }
                )
            )
        }
        return directions
    }

    private static func manifest(at url: URL) -> [String: Any]? {
        guard let data = try? Data(contentsOf: url) else { return nil }
        return (try? JSONSerialization.jsonObject(with: data)) as? [String: Any]
    }

    /// BLIP 2 if the manifest says D3 or the subprotocol is `BLIP`; BLIP 3 for `BLIP_3+...`.
    private static func dialect(of manifest: [String: Any]) -> BLIPDialect? {
        if (manifest["dialect"] as? String)?.hasPrefix("D3") == true { return .blip2 }
        let subprotocol = (manifest["generator"] as? [String: Any])?["subprotocol"] as? String
        return subprotocol == "BLIP" ? .blip2 : nil
    }

    static func hex(_ text: String) throws -> ByteBuffer {
        guard let bytes = RequestCommand.hexBytes(text) else { throw ValidationError("not hex: \(text)") }
        return ByteBuffer(bytes: bytes)
    }
}

/// Decodes one direction's frames, recording each frame and each completed message.
struct Dissector {
    let dialect: BLIPDialect
    let direction: String

    struct Result {
        var direction: String
        var frames: [[String: Any]] = []
        var messages: [[String: Any]] = []
        var lines: [String] = []
        var error: String?

        var json: [String: Any] {
            [
                "direction": self.direction, "frames": self.frames, "messages": self.messages,
                "error": self.error ?? NSNull(),
            ]
        }
    }

    func decode(_ frames: [(name: String, bytes: ByteBuffer)]) -> Result {
        let decoder = BLIPTrafficDecoder(dialect: self.dialect)
        var result = Result(direction: self.direction)
        for (name, bytes) in frames {
            let step: BLIPTrafficDecoder.Step
            do {
                step = try decoder.decode(bytes)
            } catch {
                let reason = error.wire.map { "\($0)" } ?? error.description
                result.error = "\(name): \(reason)"
                var frame: [String: Any] = ["name": name, "length": bytes.readableBytes, "error": reason]
                if let header = error.header { frame.merge(TrafficFormat.header(header, dialect: self.dialect)) { $1 } }
                result.frames.append(frame)
                result.lines.append("[\(self.direction)] \(name)  !! \(reason)")
                return result
            }
            var frame: [String: Any] = ["name": name]
            frame.merge(TrafficFormat.frame(step.frame, dialect: self.dialect)) { $1 }
            result.frames.append(frame)
            result.lines.append("[\(self.direction)] \(name)  \(TrafficFormat.frameLine(step.frame))")
            if let message = step.message {
                result.messages.append(TrafficFormat.messageObject(message))
                result.lines.append("    => \(TrafficFormat.messageLine(message))")
            }
        }
        for key in decoder.incompleteMessages {
            result.lines.append("[\(self.direction)] \(key) incomplete: its last frame is missing")
        }
        return result
    }
}
