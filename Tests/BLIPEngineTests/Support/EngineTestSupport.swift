import BLIPEngine
import BLIPPeerHarness
import BLIPWire
import Foundation
import NIOCore
import Testing

enum Fixtures {
    static let root: URL = {
        var url = URL(fileURLWithPath: #filePath)
        while url.path != "/" {
            url.deleteLastPathComponent()
            if FileManager.default.fileExists(atPath: url.appendingPathComponent("Package.swift").path) {
                return url.appendingPathComponent("Fixtures")
            }
        }
        fatalError("no Package.swift above \(#filePath)")
    }()

    static func json(_ path: String) throws -> [String: Any] {
        try JSONSerialization.jsonObject(with: Data(contentsOf: self.root.appendingPathComponent(path)))
            as! [String: Any]
    }
}

func request(
    _ profile: String = "test",
    body: ByteBuffer = ByteBuffer(),
    urgent: Bool = false,
    compressed: Bool = false,
    noReply: Bool = false,
    streamsReply: Bool = false
) -> BLIPOutgoingMessage {
    BLIPOutgoingMessage(
        .request,
        properties: ["Profile": profile],
        body: .buffer(body),
        urgent: urgent,
        compressed: compressed,
        noReply: noReply,
        streamsReply: streamsReply
    )
}

func bytes(_ count: Int, _ value: UInt8 = 0x61) -> ByteBuffer {
    ByteBuffer(repeating: value, count: count)
}

extension BLIPPeerLink {
    /// Writes and delivers in both directions until nothing moves, returning every event each side got.
    @discardableResult
    func exchange(maximumRounds: Int = 10_000) throws -> [Side: [BLIPEngineEvent]] {
        var events: [Side: [BLIPEngineEvent]] = [.client: [], .server: []]
        for _ in 0..<maximumRounds {
            var moved = false
            for side in Side.allCases {
                moved = try !self.write(from: side).isEmpty || moved
            }
            for side in Side.allCases {
                for delivery in self.deliver(from: side) {
                    moved = true
                    switch delivery {
                    case .received(let result):
                        if let event = result.event { events[side.other]!.append(event) }
                    case .failed(let error):
                        throw error
                    }
                }
            }
            if !moved { return events }
        }
        Issue.record("exchange did not settle")
        return events
    }
}

extension BLIPEngineEvent {
    var started: BLIPIncomingMessage? {
        if case .messageStarted(let message) = self { return message }
        return nil
    }
}

extension BLIPNextFrame {
    /// The frame written, or nil when the engine was idle (for `#require`).
    var sentFrame: BLIPSentFrame? {
        if case .frame(let frame) = self { return frame }
        return nil
    }
}

/// Encodes frames by hand for feeding an engine things a correct peer would never send.
struct FrameForger {
    let encoder: BLIPFrameEncoder

    init(dialect: BLIPDialect) {
        self.encoder = BLIPFrameEncoder(dialect: dialect)
    }

    func frame(
        _ type: BLIPMessageType,
        _ number: UInt64,
        flags: BLIPFrameFlags = [],
        properties: BLIPProperties = [:],
        body: ByteBuffer = ByteBuffer(),
        endOfMessage: Bool = true
    ) throws -> ByteBuffer {
        var data = ByteBuffer()
        _ = try self.encoder.writeMessageData(properties: properties, body: body, compressed: false, into: &data)
        var output = ByteBuffer()
        _ = try self.encoder.encodeFrame(
            BLIPFrameHeader(messageNumber: number, type: type, flags: flags),
            data: &data,
            endOfMessage: endOfMessage,
            maximumFrameSize: 1 << 20,
            into: &output
        )
        return output
    }

    func ack(_ type: BLIPMessageType, _ number: UInt64, count: UInt64) throws -> ByteBuffer {
        var output = ByteBuffer()
        try self.encoder.encodeACK(type, messageNumber: number, byteCount: count, into: &output)
        return output
    }
}

extension ByteBuffer {
    /// Bytes from hex text; spaces are ignored.
    init(hex: String) {
        let digits = Array(hex.filter { !$0.isWhitespace })
        var bytes: [UInt8] = []
        for index in stride(from: 0, to: digits.count, by: 2) {
            bytes.append(UInt8(String(digits[index...index + 1]), radix: 16)!)
        }
        self.init(bytes: bytes)
    }
}
