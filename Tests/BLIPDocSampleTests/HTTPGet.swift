import NIOCore
import NIOPosix

/// One plain HTTP/1.1 `GET` on a new loopback connection (`Connection: close`): the whole response as text,
/// at most 1 MiB of it.
func httpGet(port: Int, _ path: String) async throws -> String {
    let channel = try await ClientBootstrap(group: MultiThreadedEventLoopGroup.singleton)
        .connect(host: "127.0.0.1", port: port) { channel in
            channel.eventLoop.makeCompletedFuture {
                try NIOAsyncChannel<ByteBuffer, ByteBuffer>(wrappingChannelSynchronously: channel)
            }
        }
    return try await channel.executeThenClose { inbound, outbound in
        let request = "GET \(path) HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nConnection: close\r\n\r\n"
        try await outbound.write(ByteBuffer(string: request))
        var response = ""
        for try await piece in inbound {
            response += String(buffer: piece)
            guard response.utf8.count < 1 << 20 else { break }
        }
        return response
    }
}
