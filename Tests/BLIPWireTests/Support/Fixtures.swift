import BLIPWire
import Crypto
import Foundation
import NIOCore

/// The package's `Fixtures/` folder, found from this file's path (SwiftPM resources cannot live outside
/// a target).
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

    static func url(_ relativePath: String) -> URL {
        self.root.appendingPathComponent(relativePath)
    }

    static func data(_ relativePath: String) throws -> Data {
        try Data(contentsOf: self.url(relativePath))
    }

    static func json(_ relativePath: String) throws -> [String: Any] {
        try JSONSerialization.jsonObject(with: try self.data(relativePath)) as! [String: Any]
    }

    static func buffer(_ relativePath: String) throws -> ByteBuffer {
        ByteBuffer(bytes: try self.data(relativePath))
    }
}

extension ByteBuffer {
    /// Bytes from hex text; spaces are ignored.
    init(hex: String) {
        let digits = hex.filter { !$0.isWhitespace }
        precondition(digits.count % 2 == 0, "odd hex length")
        var bytes: [UInt8] = []
        var index = digits.startIndex
        while index < digits.endIndex {
            let next = digits.index(index, offsetBy: 2)
            bytes.append(UInt8(digits[index..<next], radix: 16)!)
            index = next
        }
        self.init(bytes: bytes)
    }

    var hexString: String {
        self.readableBytesView.map { String(format: "%02X", $0) }.joined(separator: " ")
    }

    var sha256Hex: String {
        SHA256.hash(data: Array(self.readableBytesView)).map { String(format: "%02x", $0) }.joined()
    }
}

extension BLIPMessageType {
    init(name: String) {
        switch name {
        case "MSG": self = .request
        case "RPY": self = .response
        case "ERR": self = .error
        case "ACK_MSG": self = .ackRequest
        case "ACK_RPY": self = .ackResponse
        default: fatalError("unknown type name \(name)")
        }
    }
}

extension BLIPFrameFlags {
    init(names: [String]) {
        self = []
        for name in names {
            switch name {
            case "compressed": self.insert(.compressed)
            case "urgent": self.insert(.urgent)
            case "noReply": self.insert(.noReply)
            case "moreComing": self.insert(.moreComing)
            case "meta": self.insert(.meta)
            default: fatalError("unknown flag name \(name)")
            }
        }
    }
}

extension BLIPWireError.Code {
    /// The case name, for comparing against the reasons named in fixture files.
    var caseName: String {
        let text = String(describing: self)
        return String(text.prefix { $0 != "(" })
    }
}

func propertyPairs(_ value: Any?) -> [[String]]? {
    (value as? [[Any]])?.map { $0.map { $0 as! String } }
}

func pairs(_ properties: BLIPProperties) -> [[String]] {
    properties.map { [$0.name, $0.value] }
}
