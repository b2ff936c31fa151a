internal import BLIP
internal import Foundation
internal import NIOCore

extension BenchRunner {
    /// Asks `stream-source` for one `size`-byte streamed reply (default 1 GiB; the server's source holds
    /// one 1 MiB chunk) and reads it piece by piece, reporting the throughput and the peak resident memory
    /// (VmHWM) of this process and, with `--self`, of the server. The target is 64 MiB per side
    /// (docs/performance.md): the reply must flow through both ends without piling up.
    func streamedReply(size: Int, data: BenchmarkData) async throws -> BenchResult {
        let name = "stream-down-\(data)"
        let progress = self.progress
        let (elapsed, wire) = try await self.connect { connection in
            let before = connection.statistics
            let started = ContinuousClock.now
            let reply = try await connection.sendRequestStreamingReply(
                BLIPRequest(profile: "stream-source", properties: ["Count": "\(size)", "Data": data.rawValue])
            )
            var received = 0
            for try await piece in reply.body {
                let previous = received
                received += piece.readableBytes
                if received >> 26 != previous >> 26 { progress.show(name, received >> 20, size >> 20) }
            }
            let elapsed = ContinuousClock.now - started
            guard received == size else { throw BenchError("received \(received) of \(size) bytes") }
            return (elapsed, connection.statistics.bytesReceived - before.bytesReceived)
        }
        return self.streamedResult(name, size: size, elapsed: elapsed, wire: wire, data: data, direction: "down")
    }
}
