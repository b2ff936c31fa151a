import BLIPWebSocket
import NIOCore
import Synchronization
import Testing

/// The hand-driven peer that floods our server must not flood its own event loop: the loops it shares with
/// the other hand-driven peers (servers whose handshakes other suites wait for) stayed busy masking its
/// backlog for seconds at a time, and those handshakes timed out on a slow machine.
@Suite("The forging peer", .timeLimit(.minutes(2)))
struct ForgingPeerTests {
    /// Counts the bytes that leave the channel's pipeline, below NIO's frame encoder.
    final class SentBytes: ChannelOutboundHandler, Sendable {
        typealias OutboundIn = ByteBuffer
        let count = Atomic<Int>(0)

        func write(context: ChannelHandlerContext, data: NIOAny, promise: EventLoopPromise<Void>?) {
            self.count.add(Self.unwrapOutboundIn(data).readableBytes, ordering: .relaxed)
            context.write(data, promise: promise)
        }
    }

    @Test("each write returns once the event loop has masked and written its frame")
    func writesWaitForTheLoop() async throws {
        let frames = HandMadeFrames()
        try await withServer { server in
            let raw = try await RawWebSocketClient.connect(port: server.port, subprotocols: ["BLIP_3+CBMobile_3"])
            let sent = SentBytes()
            try await raw.channel.channel.pipeline.addHandler(sent, position: .first).get()
            try await raw.channel.executeThenClose { inbound, outbound in
                let peer = ForgingPeer(inbound: inbound, outbound: outbound, eventLoop: raw.eventLoop, handMade: true)
                var written = 0
                for number in 1...64 {
                    let frame = try frames.request(
                        UInt64(number),
                        profile: "echo",
                        body: HostilePeerTests.piece8K,
                        moreComing: true
                    )
                    try await peer.write(frame)
                    written += frame.readableBytes
                    let left = sent.count.load(ordering: .relaxed)
                    #expect(left >= written, "frame \(number): \(written - left) bytes still queued for the loop")
                    if left < written { break }
                }
            }
        }
    }
}
