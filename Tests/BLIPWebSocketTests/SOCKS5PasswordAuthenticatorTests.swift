import NIOCore
import NIOEmbedded
import Testing

@testable import BLIPWebSocket

/// The RFC 1929 step in front of NIOSOCKS, byte by byte: what it sends, what it hands on, and what it
/// refuses.
@Suite("SOCKS5 username and password")
struct SOCKS5PasswordAuthenticatorTests {
    /// A channel with the authenticator and what NIOSOCKS would write first: its greeting.
    static func channel() throws -> EmbeddedChannel {
        let channel = EmbeddedChannel(handler: SOCKS5PasswordAuthenticator(username: "alice", password: "pw"))
        try channel.writeOutbound(ByteBuffer(bytes: [5, 1, 0]))
        return channel
    }

    static func sent(_ channel: EmbeddedChannel) throws -> [UInt8] {
        var bytes: [UInt8] = []
        while var buffer = try channel.readOutbound(as: ByteBuffer.self) {
            bytes += buffer.readBytes(length: buffer.readableBytes) ?? []
        }
        return bytes
    }

    static func handedOn(_ channel: EmbeddedChannel) throws -> [UInt8] {
        var bytes: [UInt8] = []
        while var buffer = try channel.readInbound(as: ByteBuffer.self) {
            bytes += buffer.readBytes(length: buffer.readableBytes) ?? []
        }
        return bytes
    }

    @Test("offers both methods, sends the password a byte-at-a-time proxy asks for, hands on 'no authentication'")
    func passwordChosen() throws {
        let channel = try Self.channel()
        #expect(try Self.sent(channel) == [5, 2, 0, 2])
        for byte: UInt8 in [5, 2] { try channel.writeInbound(ByteBuffer(bytes: [byte])) }
        #expect(try Self.sent(channel) == [1, 5] + Array("alice".utf8) + [2] + Array("pw".utf8))
        #expect(try Self.handedOn(channel).isEmpty, "NIOSOCKS sees nothing yet")
        try channel.writeInbound(ByteBuffer(bytes: [1]))
        try channel.writeInbound(ByteBuffer(bytes: [0, 5, 0, 0, 1]))  // the verdict, then the reply's start
        #expect(try Self.handedOn(channel) == [5, 0, 5, 0, 0, 1])
        #expect(throws: (any Error).self, "gone from the pipeline") {
            try channel.pipeline.syncOperations.handler(type: SOCKS5PasswordAuthenticator.self)
        }
        _ = try channel.finish()
    }

    @Test("no authentication chosen: the choice goes to NIOSOCKS as it came, nothing is sent")
    func noneChosen() throws {
        let channel = try Self.channel()
        _ = try Self.sent(channel)
        try channel.writeInbound(ByteBuffer(bytes: [5, 0]))
        #expect(try Self.sent(channel).isEmpty)
        #expect(try Self.handedOn(channel) == [5, 0])
        _ = try channel.finish()
    }

    @Test("a reply that is not SOCKS5 gets no password; a rejected one or a bad verdict is an error")
    func refusals() throws {
        let notSOCKS = try Self.channel()
        _ = try Self.sent(notSOCKS)
        try notSOCKS.writeInbound(ByteBuffer(bytes: [4, 2]))
        #expect(try Self.sent(notSOCKS).isEmpty, "no credentials to a peer that is not SOCKS5")
        #expect(try Self.handedOn(notSOCKS) == [4, 2])

        for (verdict, kind) in [([UInt8](arrayLiteral: 1, 1), "rejected"), ([5, 0], "version")] {
            let channel = try Self.channel()
            try channel.writeInbound(ByteBuffer(bytes: [5, 2]))
            _ = try Self.sent(channel)
            #expect(throws: (any Error).self, "\(kind)") { try channel.writeInbound(ByteBuffer(bytes: verdict)) }
            #expect(!channel.isActive)
        }
    }
}
