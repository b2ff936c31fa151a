import BLIP
import BLIPWire
import Benchmark
import NIOCore

/// Round trips through two whole connections over the in-memory transport: the public API on both sides
/// (a caller's `sendRequest`, a router's handler), the connection core, the engine and the codec. Each sample
/// is `roundTripsPerSample` round trips on connections made (and warmed up) outside the measurement, so a
/// threshold of N mallocs means N / 100 per round trip, both sides together. With `callbacks` the requests
/// go with `sendRequest(_:timeout:progress:onReply:)`: each reply's callback sends the next request, and
/// the sample awaits only the last.
func connectionBenchmarks() {
    let shapes: [(BLIPDialect, synchronous: Bool, callbacks: Bool)] = [
        (.blip3, false, false), (.blip3, true, false), (.blip2, false, false), (.blip3, true, true),
    ]
    for (dialect, synchronous, callbacks) in shapes {
        let handler = synchronous ? "-synchronous-handler" : ""
        let caller = callbacks ? "-callbacks" : ""
        Benchmark(
            "connection-round-trip-100B-\(dialect)\(handler)\(caller)-x\(roundTripsPerSample)",
            // Threads hand work to each other: a sample's count varies by a few percent (where a reply's
            // clean-up lands, and the Dispatch queues' own allocations).
            configuration: .init(
                maxDuration: .seconds(3),
                maxIterations: 2_000,
                thresholds: [.mallocCountTotal: .init(relative: [.p90: 5.0])]
            )
        ) { benchmark in
            let (clientTransport, serverTransport) = BLIPInMemoryTransport.makePair(dialect: dialect)
            var router = BLIPRouter()
            if synchronous {
                router.registerSynchronous(profile: "echo") { request, _ in BLIPResponse(body: request.body) }
            } else {
                router.register(profile: "echo") { request, _ in BLIPResponse(body: request.body) }
            }
            let server = BLIPConnection(transport: serverTransport, router: router)
            let serverRun = Task { await server.run() }
            let request = BLIPRequest(profile: "echo", body: ByteBuffer(bytes: BenchmarkData.pattern(100)))
            try await withBLIPConnection(over: clientTransport) { client in
                for _ in 0..<20 { _ = try await client.sendRequest(request) }
                benchmark.startMeasurement()
                if callbacks {
                    try await withCheckedThrowingContinuation { (done: CheckedContinuation<Void, any Error>) in
                        CallbackChain(client: client, request: request, remaining: roundTripsPerSample, done: done)
                            .next()
                    }
                } else {
                    for _ in 0..<roundTripsPerSample {
                        blackHole(try await client.sendRequest(request))
                    }
                }
                benchmark.stopMeasurement()
            }
            _ = await server.close()
            _ = await serverRun.value
        }
    }
}

/// Sends `remaining` requests one after another, each from the reply callback of the one before.
private struct CallbackChain: Sendable {
    let client: BLIPConnection
    let request: BLIPRequest
    let remaining: Int
    let done: CheckedContinuation<Void, any Error>

    func next() {
        guard self.remaining > 0 else { return self.done.resume() }
        self.client.sendRequest(self.request) { result in
            switch result {
            case .success(let reply):
                blackHole(reply)
                CallbackChain(
                    client: self.client,
                    request: self.request,
                    remaining: self.remaining - 1,
                    done: self.done
                )
                .next()
            case .failure(let error): self.done.resume(throwing: error)
            }
        }
    }
}

let roundTripsPerSample = 100
