internal import BLIP
internal import BLIPWebSocket
internal import Foundation
internal import NIOCore

extension BenchRunner {
    /// Opens `count` BLIP connections that send nothing and reports what each costs in resident memory: on
    /// the server (with `--self`, read from its /proc status) and in this process. The target is 20 KiB per
    /// connection on the server (docs/performance.md).
    func idleConnections(count: Int) async throws -> BenchResult {
        var configuration = self.clientConfiguration
        configuration.connectTimeout = .seconds(30)
        let serverBefore = self.serverProcessID.flatMap(ProcessMemory.resident(of:))
        let clientBefore = ProcessMemory.resident(of: getpid())
        var transports: [BLIPWebSocketTransport] = []
        transports.reserveCapacity(count)
        let started = ContinuousClock.now
        for index in 0..<count {
            transports.append(try await BLIPWebSocketClient.openTransport(to: self.url, configuration: configuration))
            if index % 500 == 0 { self.progress.show("idle", index, count) }
        }
        let opened = ContinuousClock.now - started
        // The server sets up its side when the upgrade completes, before our handshake returns; a round trip
        // on the last connection would not add anything. Give its event loops a moment to settle.
        try await Task.sleep(for: .milliseconds(500))
        let serverAfter = self.serverProcessID.flatMap(ProcessMemory.resident(of:))
        let clientAfter = ProcessMemory.resident(of: getpid())
        for transport in transports { transport.close(.normal) }
        var extra: [String: Any] = ["open_seconds": (opened.seconds * 100).rounded() / 100]
        if let serverBefore, let serverAfter {
            extra["server_kib_per_connection"] =
                (Double(serverAfter - serverBefore) / 1024 / Double(count) * 10).rounded() / 10
        }
        if let clientBefore, let clientAfter {
            extra["client_kib_per_connection"] =
                (Double(clientAfter - clientBefore) / 1024 / Double(count) * 10).rounded() / 10
        }
        return BenchResult(
            workload: "idle",
            count: count,
            concurrency: count,
            data: "none",
            compressed: false,
            direction: "none",
            extra: extra
        )
    }
}
