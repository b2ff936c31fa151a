internal import ArgumentParser
internal import BLIPWire
internal import Crypto
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
            (
                URL(fileURLWithPath: path).lastPathComponent,
                ByteBuffer(bytes: try Data(contentsOf: URL(fileURLWithPath: path)))
            )
        }
        return (self.dialect?.dialect ?? .blip3, [(label, frames)])
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
        let decoder = BLIPFrameDecoder(dialect: self.dialect)
        var readers: [String: (BLIPMessageReader, BLIPFrameHeader, ByteBuffer)] = [:]
        var result = Result(direction: self.direction)
        for (name, bytes) in frames {
            let decoded: BLIPDecodedFrame
            do {
                decoded = try decoder.decode(bytes)
            } catch {
                result.error = "\(name): \(error)"
                result.frames.append(["name": name, "length": bytes.readableBytes, "error": "\(error)"])
                result.lines.append("[\(self.direction)] \(name)  !! \(error)")
                return result
            }
            var frame: [String: Any] = ["name": name, "length": bytes.readableBytes]
            switch decoded {
            case .ack(let ack):
                frame.merge(self.describe(ack.header)) { $1 }
                frame["ack_bytes"] = Int(ack.byteCount)
                result.lines.append(
                    "[\(self.direction)] \(name)  \(ack.header)  len \(bytes.readableBytes)  acknowledges \(ack.byteCount) bytes"
                )
            case .malformedACK(let header, let error):
                frame.merge(self.describe(header)) { $1 }
                frame["ack_error"] = "\(error)"
                result.lines.append(
                    "[\(self.direction)] \(name)  \(header)  !! undecodable ACK count (ignored): \(error)"
                )
            case .unknownType(let header):
                frame.merge(self.describe(header)) { $1 }
                result.lines.append("[\(self.direction)] \(name)  \(header)  unknown type (ignored)")
            case .data(let data):
                frame.merge(self.describe(data.header)) { $1 }
                frame["body_length"] = data.bodyLength
                frame["data_length"] = data.payload.readableBytes
                var line =
                    "[\(self.direction)] \(name)  \(data.header)  len \(bytes.readableBytes)  data \(data.payload.readableBytes)"
                if let checksum = data.checksum {
                    frame["checksum"] = String(format: "%08X", checksum)
                    frame["crc"] = "ok"
                    line += "  crc ok \(String(format: "%08X", checksum))"
                }
                result.lines.append(line)
                let key = "\(data.header.type == .request ? "MSG" : "RES")#\(data.header.messageNumber)"
                var (reader, first, body) =
                    readers.removeValue(forKey: key)
                    ?? (decoder.makeMessageReader(for: data.header), data.header, ByteBuffer())
                do {
                    var piece = try reader.append(data.payload)
                    body.writeBuffer(&piece)
                    if data.header.flags.contains(.moreComing) {
                        readers[key] = (reader, first, body)
                    } else {
                        try reader.finish()
                        let message = self.describe(first, properties: reader.properties!, body: body)
                        result.messages.append(message.json)
                        result.lines.append(message.line)
                    }
                } catch {
                    result.error = "\(name): \(error)"
                    frame["error"] = "\(error)"
                    result.lines.append("[\(self.direction)] \(name)  !! \(error)")
                    result.frames.append(frame)
                    return result
                }
            }
            result.frames.append(frame)
        }
        for (key, _) in readers {
            result.lines.append("[\(self.direction)] \(key) incomplete: its last frame is missing")
        }
        return result
    }

    private func describe(_ header: BLIPFrameHeader) -> [String: Any] {
        [
            "number": Int(header.messageNumber),
            "type": "\(header.type)",
            "flags": Self.flagNames(header.flags),
            "wire_flags": String(format: "0x%02X", (try? header.wireFlags(in: self.dialect)) ?? 0),
        ]
    }

    private func describe(_ header: BLIPFrameHeader, properties: BLIPProperties, body: ByteBuffer) -> (
        json: [String: Any], line: String
    ) {
        let bytes = Array(body.readableBytesView)
        let digest = SHA256.hash(data: bytes).map { String(format: "%02x", $0) }.joined()
        let text = bytes.count < 4096 ? String(validating: bytes, as: UTF8.self) : nil
        var json: [String: Any] = [
            "number": Int(header.messageNumber),
            "type": "\(header.type)",
            "flags": Self.flagNames(header.flags.subtracting(.moreComing)),
            "properties": properties.map { [$0.name, $0.value] },
            "body_length": bytes.count,
            "body_sha256": digest,
        ]
        if let text { json["body_text"] = text }
        let shown = properties.map { "\($0.name): \($0.value)" }.joined(separator: ", ")
        let preview: String
        if let text {
            preview =
                "\"\(text.prefix(60).replacingOccurrences(of: "\n", with: "\\n"))\(text.count > 60 ? "..." : "")\""
        } else {
            preview = "sha256 \(digest.prefix(16))..."
        }
        return (
            json,
            "    => \(header.type)#\(header.messageNumber) complete  {\(shown)}  body \(bytes.count) bytes \(preview)"
        )
    }

    static func flagNames(_ flags: BLIPFrameFlags) -> [String] {
        [
            (BLIPFrameFlags.compressed, "compressed"), (.urgent, "urgent"), (.noReply, "noReply"),
            (.moreComing, "moreComing"), (.meta, "meta"),
        ]
        .filter { flags.contains($0.0) }
        .map(\.1)
    }
}
