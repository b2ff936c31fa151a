internal import BLIP
internal import Foundation
internal import NIOCore

extension BenchRunner {
    /// Streams one `size`-byte message (default 1 GiB) to `sink` from a producer that never holds more than
    /// one chunk, and reports the throughput and the peak resident memory (VmHWM) of this process and, with
    /// `--self`, of the server. The target is 64 MiB per side (docs/performance.md): the body must flow
    /// through both ends without piling up.
    func streamedMessage(size: Int, data: BenchmarkData) async throws -> BenchResult {
        let name = "stream-up-\(data)"
        let chunk = data.bytes(1 << 20)
        let (elapsed, wire) = try await self.connect { connection in
            let before = connection.statistics
            let started = ContinuousClock.now
            let reply = try await connection.sendRequest(
                BLIPRequest(profile: "sink"),
                body: RepeatedChunks(chunk: chunk, total: size, progress: self.progress, name: name)
            )
            let elapsed = ContinuousClock.now - started
            guard reply.properties["Count"] == "\(size)" else { throw BenchError("sink counted \(reply.properties)") }
            return (elapsed, connection.statistics.bytesSent - before.bytesSent)
        }
        return self.streamedResult(name, size: size, elapsed: elapsed, wire: wire, data: data, direction: "up")
    }

    /// The result of one streamed transfer, with the peak resident memory of both sides: what the streamed
    /// workloads exist to show.
    func streamedResult(
        _ name: String,
        size: Int,
        elapsed: Duration,
        wire: Int,
        data: BenchmarkData,
        direction: String
    ) -> BenchResult {
        var extra: [String: Any] = [:]
        if let peak = ProcessMemory.peakResident(of: getpid()) { extra["client_peak_rss_mib"] = peak >> 20 }
        if let server = self.serverProcessID, let peak = ProcessMemory.peakResident(of: server) {
            extra["server_peak_rss_mib"] = peak >> 20
        }
        return BenchResult(
            workload: name,
            count: 1,
            concurrency: 1,
            mibPerSecond: Double(size) / 1_048_576 / elapsed.seconds,
            wireBytes: wire,
            data: data.rawValue,
            compressed: false,
            direction: direction,
            extra: extra
        )
    }
}

/// A body of `total` bytes made of one chunk sent again and again, 64 KiB at a time: only the chunk is
/// ever in memory, whatever the total.
struct RepeatedChunks: AsyncSequence, Sendable {
    let chunk: ByteBuffer
    let total: Int
    let progress: Progress
    let name: String

    struct AsyncIterator: AsyncIteratorProtocol {
        let source: RepeatedChunks
        var sent = 0

        mutating func next() async -> ByteBuffer? {
            guard self.sent < self.source.total else { return nil }
            let offset = self.sent % self.source.chunk.readableBytes
            let length = Swift.min(64 << 10, self.source.total - self.sent, self.source.chunk.readableBytes - offset)
            self.sent += length
            if self.sent % (64 << 20) == 0 {
                self.source.progress.show(self.source.name, self.sent >> 20, self.source.total >> 20)
            }
            return self.source.chunk.getSlice(at: self.source.chunk.readerIndex + offset, length: length)
        }
    }

    func makeAsyncIterator() -> AsyncIterator { AsyncIterator(source: self) }
}
