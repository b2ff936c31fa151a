import BLIPWire
import Foundation
import NIOCore

/// One captured connection from `Fixtures/<set>/manifest.json`: frames per direction in send order,
/// and the messages they carry.
struct CaptureScenario: Sendable, CustomStringConvertible {
    struct Frame: Sendable {
        var file: String
        var direction: String
        var number: UInt64
        var type: BLIPMessageType
        var wireFlags: UInt64
        var headerLength: Int
        /// The whole frame's length.
        var length: Int
        var checksum: UInt32?
        var ackCount: UInt64?
        var inflatedLength: Int?
        var messageID: String
    }

    struct Message: Sendable {
        var id: String
        var direction: String
        var number: UInt64
        var type: BLIPMessageType
        var urgent: Bool
        var noReply: Bool
        var compressed: Bool
        var properties: [[String]]
        var bodyLength: Int
        var bodySHA256: String
        var body: [UInt8]
        var frameFiles: [String]
    }

    enum Implementation: String, Sendable {
        case goBLIP = "go-blip"
        case goBLIP2017 = "go-blip-d3"
        case liteCore = "litecore"

        var dialect: BLIPDialect { self == .goBLIP2017 ? .blip2 : .blip3 }
    }

    var implementation: Implementation
    var name: String
    var folder: String
    var frames: [Frame]
    var messages: [Message]

    var dialect: BLIPDialect { self.implementation.dialect }
    var description: String { "\(self.implementation.rawValue)/\(self.folder)" }

    var directions: [String] { ["client->server", "server->client"] }

    func frames(in direction: String) -> [Frame] {
        self.frames.filter { $0.direction == direction }
    }

    func frameBytes(_ frame: Frame) throws -> ByteBuffer {
        try Fixtures.buffer("\(self.implementation.rawValue)/\(self.folder)/\(frame.file)")
    }

    func message(id: String, direction: String) -> Message? {
        self.messages.first { $0.id == id && $0.direction == direction }
    }

    static func load(_ implementation: Implementation) -> [CaptureScenario] {
        let set = implementation.rawValue
        let manifest = try! Fixtures.json("\(set)/manifest.json")
        return (manifest["scenarios"] as! [[String: Any]]).map { scenario in
            let folder = scenario["dir"] as! String
            let frames = (scenario["frames"] as! [[String: Any]]).compactMap { frame -> Frame? in
                guard let file = frame["file"] as? String, let blip = frame["blip"] as? [String: Any] else {
                    return nil  // WebSocket control frames are listed without a file
                }
                return Frame(
                    file: file,
                    direction: frame["direction"] as! String,
                    number: UInt64(blip["msg_number"] as! Int),
                    type: BLIPMessageType(name: blip["type"] as! String),
                    wireFlags: UInt64(blip["flags"] as! Int),
                    headerLength: blip["header_len"] as! Int,
                    length: frame["len"] as! Int,
                    checksum: (frame["checksum_hex"] as? String).map { UInt32($0, radix: 16)! },
                    ackCount: (frame["ack_bytes_received"] as? Int).map(UInt64.init),
                    inflatedLength: frame["inflated_len"] as? Int,
                    messageID: frame["message"] as! String
                )
            }
            let messages = (scenario["messages"] as! [[String: Any]]).map { message in
                let body: [UInt8]
                if let file = message["body_file"] as? String {
                    body = Array(try! Fixtures.data("\(set)/\(folder)/\(file)"))
                } else {
                    body = Array(((message["body_text"] as? String) ?? "").utf8)
                }
                return Message(
                    id: message["id"] as! String,
                    direction: message["direction"] as! String,
                    number: UInt64(message["msg_number"] as! Int),
                    type: BLIPMessageType(name: message["type"] as! String),
                    urgent: message["urgent"] as! Bool,
                    noReply: message["no_reply"] as! Bool,
                    compressed: message["compressed"] as! Bool,
                    properties: propertyPairs(message["properties"])!,
                    bodyLength: message["body_len"] as! Int,
                    bodySHA256: message["body_sha256"] as! String,
                    body: body,
                    frameFiles: message["frames"] as! [String]
                )
            }
            return CaptureScenario(
                implementation: implementation,
                name: scenario["name"] as! String,
                folder: folder,
                frames: frames,
                messages: messages
            )
        }
    }

    static let all: [CaptureScenario] = load(.goBLIP) + load(.goBLIP2017) + load(.liteCore)
}
