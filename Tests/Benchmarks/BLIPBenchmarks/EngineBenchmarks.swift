import BLIPEngine
import BLIPWire
import Benchmark
import NIOCore

func engineBenchmarks() {
    // 1 000 messages queued, every fourth urgent, each 20 KiB (two frames, more while urgent messages
    // shrink normal frames to 4 KiB): how fast the engine picks and frames the next frame. Each sample
    // drains a freshly filled out-box; the filling is not measured.
    Benchmark(
        "engine-schedule-1000-mixed-messages",
        configuration: .init(
            metrics: [.wallClock, .mallocCountTotal],
            maxDuration: .seconds(3),
            maxIterations: 300,
            thresholds: [.mallocCountTotal: .init(absolute: [.p90: 1])]
        )
    ) { benchmark in
        let body = ByteBuffer(repeating: 0x61, count: 20_000)
        var frame = ByteBuffer()
        frame.reserveCapacity(16_384)
        let now = NIODeadline.now()
        let engine = BLIPConnectionEngine(configuration: BLIPEngineConfiguration(dialect: .blip2))
        for index in 0..<1000 {
            _ = try! engine.enqueue(
                BLIPOutgoingMessage(
                    .request,
                    properties: ["Profile": "bench"],
                    body: .buffer(body),
                    urgent: index % 4 == 0,
                    noReply: true
                )
            )
        }
        benchmark.startMeasurement()
        var frames = 0
        while true {
            frame.clear()
            guard case .frame = try! engine.nextFrame(into: &frame, now: now) else { break }
            frames += 1
        }
        benchmark.stopMeasurement()
        if scheduledFrames.count == nil { print("engine-schedule-1000-mixed-messages: \(frames) frames per sample") }
        // Every sample schedules the same frames.
        precondition(scheduledFrames.count == nil || scheduledFrames.count == frames)
        scheduledFrames.count = frames
        blackHole(frames)
    }

    // A 100-byte request and its 100-byte reply through two engines (client and server), as over a
    // connection in steady state.
    for dialect in BLIPDialect.allCases {
        Benchmark("engine-round-trip-100B-\(dialect)") { benchmark in
            let client = BLIPConnectionEngine(configuration: BLIPEngineConfiguration(dialect: dialect))
            let server = BLIPConnectionEngine(configuration: BLIPEngineConfiguration(dialect: dialect))
            let body = ByteBuffer(bytes: BenchmarkData.pattern(100))
            var frame = ByteBuffer()
            frame.reserveCapacity(16_384)
            let now = NIODeadline.now()
            func roundTrip() {
                _ = try! client.enqueue(
                    BLIPOutgoingMessage(.request, properties: ["Profile": "echo"], body: .buffer(body))
                )
                frame.clear()
                guard case .frame = try! client.nextFrame(into: &frame, now: now),
                    case .messageStarted(let request)? = try! server.receive(frame, now: now).event
                else { fatalError("no request") }
                _ = try! server.enqueue(
                    BLIPOutgoingMessage(
                        .response(toRequest: request.id.number),
                        properties: [:],
                        body: .buffer(request.body)
                    )
                )
                frame.clear()
                guard case .frame = try! server.nextFrame(into: &frame, now: now),
                    case .messageStarted(let reply)? = try! client.receive(frame, now: now).event
                else { fatalError("no reply") }
                precondition(reply.body.readableBytes == 100)
            }
            for _ in 0..<100 { roundTrip() }
            benchmark.startMeasurement()
            for _ in benchmark.scaledIterations {
                roundTrip()
            }
        }
    }
}

/// Frames the scheduling benchmark sends for its 1 000 messages, as first measured.
final class FrameCount: @unchecked Sendable {  // only touched by the benchmark's single thread
    var count: Int?
}
let scheduledFrames = FrameCount()
