// swift-tools-version: 6.1
import PackageDescription

let swiftSettings: [SwiftSetting] = [
    .enableUpcomingFeature("ExistentialAny"),
    .enableUpcomingFeature("MemberImportVisibility"),
    .enableUpcomingFeature("InternalImportsByDefault"),
    // Async functions run on their caller's executor: a send from an actor does not leave it and come back
    // (two executor switches per request; Tests/BLIPTests/CallerExecutorTests.swift).
    .enableUpcomingFeature("NonisolatedNonsendingByDefault"),
]

let nioCore: Target.Dependency = .product(name: "NIOCore", package: "swift-nio")
let propertyBased: Target.Dependency = .product(name: "PropertyBased", package: "swift-property-based")
let crypto: Target.Dependency = .product(name: "Crypto", package: "swift-crypto")
let deque: Target.Dependency = .product(name: "DequeModule", package: "swift-collections")
let logging: Target.Dependency = .product(name: "Logging", package: "swift-log")
let metrics: Target.Dependency = .product(name: "CoreMetrics", package: "swift-metrics")
let nioPosix: Target.Dependency = .product(name: "NIOPosix", package: "swift-nio")
// NIO's locks are pthread mutexes, which ThreadSanitizer understands; the standard library's Mutex takes
// priority-inheriting futexes under contention, which it cannot follow (false reports).
let nioLocks: Target.Dependency = .product(name: "NIOConcurrencyHelpers", package: "swift-nio")
let nioHTTP1: Target.Dependency = .product(name: "NIOHTTP1", package: "swift-nio")
let nioWebSocket: Target.Dependency = .product(name: "NIOWebSocket", package: "swift-nio")
let nioSSL: Target.Dependency = .product(name: "NIOSSL", package: "swift-nio-ssl")
let nioExtras: Target.Dependency = .product(name: "NIOExtras", package: "swift-nio-extras")
let nioSOCKS: Target.Dependency = .product(name: "NIOSOCKS", package: "swift-nio-extras")
let x509: Target.Dependency = .product(name: "X509", package: "swift-certificates")
let asn1: Target.Dependency = .product(name: "SwiftASN1", package: "swift-asn1")
let serviceLifecycle: Target.Dependency = .product(name: "ServiceLifecycle", package: "swift-service-lifecycle")
let unixSignals: Target.Dependency = .product(name: "UnixSignals", package: "swift-service-lifecycle")
let tracing: Target.Dependency = .product(name: "Tracing", package: "swift-distributed-tracing")
let hummingbird: Target.Dependency = .product(name: "Hummingbird", package: "hummingbird")
let hummingbirdCore: Target.Dependency = .product(name: "HummingbirdCore", package: "hummingbird")
let httpTypes: Target.Dependency = .product(name: "HTTPTypes", package: "swift-http-types")
let nioHTTPTypes: Target.Dependency = .product(name: "NIOHTTPTypes", package: "swift-nio-extras")
let nioHTTPTypesHTTP1: Target.Dependency = .product(name: "NIOHTTPTypesHTTP1", package: "swift-nio-extras")

let package = Package(
    name: "swift-blip",
    platforms: [.macOS(.v15), .iOS(.v18), .tvOS(.v18), .watchOS(.v11), .visionOS(.v2)],
    products: [
        .library(name: "BLIP", targets: ["BLIP"]),
        .library(name: "BLIPWebSocket", targets: ["BLIPWebSocket"]),
        // A separate product: the static files and browser client of a native/web bridge.
        .library(name: "BLIPWebBridge", targets: ["BLIPWebBridge"]),
        // A separate product: only those who mount BLIP on Hummingbird build Hummingbird.
        .library(name: "BLIPHummingbird", targets: ["BLIPHummingbird"]),
        .executable(name: "blip", targets: ["BLIPTool"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-nio.git", from: "2.101.0"),
        .package(url: "https://github.com/apple/swift-collections.git", from: "1.1.0"),
        .package(url: "https://github.com/apple/swift-log.git", from: "1.6.0"),
        .package(url: "https://github.com/apple/swift-metrics.git", from: "2.5.0"),
        .package(url: "https://github.com/apple/swift-crypto.git", "3.12.0"..<"5.0.0"),
        .package(url: "https://github.com/apple/swift-nio-ssl.git", from: "2.30.0"),
        .package(url: "https://github.com/apple/swift-nio-extras.git", from: "1.35.0"),
        .package(url: "https://github.com/apple/swift-certificates.git", from: "1.10.0"),
        .package(url: "https://github.com/apple/swift-asn1.git", from: "1.0.0"),
        .package(url: "https://github.com/apple/swift-argument-parser.git", from: "1.5.0"),
        .package(url: "https://github.com/swift-server/swift-service-lifecycle.git", from: "2.6.0"),
        .package(url: "https://github.com/apple/swift-distributed-tracing.git", from: "1.7.0"),
        // BLIPHummingbird only; its default traits (swift-configuration, full Foundation) are not needed.
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.0", traits: []),
        .package(url: "https://github.com/apple/swift-http-types.git", from: "1.8.0"),
        // documentation only: `swift package generate-documentation` (.ci/docs.sh)
        .package(url: "https://github.com/swiftlang/swift-docc-plugin", from: "1.5.0"),
        // test-only
        .package(url: "https://github.com/x-sheep/swift-property-based.git", from: "2.0.0"),
    ],
    targets: [
        .systemLibrary(
            name: "CBLIPZlib",
            pkgConfig: "zlib",
            providers: [.apt(["zlib1g-dev"]), .yum(["zlib-devel"]), .brew(["zlib"])]
        ),
        .target(
            name: "BLIPWire",
            dependencies: ["CBLIPZlib", nioCore],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "BLIPEngine",
            dependencies: ["BLIPWire", nioCore, deque],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "BLIPPeerHarness",
            dependencies: ["BLIP", "BLIPEngine", "BLIPWire", nioCore, deque],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "BLIP",
            dependencies: ["BLIPEngine", "BLIPWire", nioCore, nioLocks, deque, logging, metrics, tracing],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "BLIPWebSocket",
            dependencies: [
                "BLIP", "BLIPWire", nioCore, nioPosix, nioLocks, nioHTTP1, nioWebSocket, nioSSL, nioExtras, nioSOCKS,
                crypto, x509, asn1, logging, deque, serviceLifecycle, httpTypes,
            ],
            swiftSettings: swiftSettings
        ),
        // The web bridge: static files and the browser client served beside a BLIP endpoint.
        .target(
            name: "BLIPWebBridge",
            dependencies: ["BLIPWebSocket", nioCore, nioPosix, nioHTTP1],
            // The browser client, compiled into the library (no bundle to find at run time).
            resources: [.embedInCode("Resources/blip.js"), .embedInCode("Resources/blip.d.ts")],
            swiftSettings: swiftSettings
        ),
        // The inspecting proxy and the traffic decoder behind `blip proxy` and `blip decode`: package-internal,
        // built only by the tool and the tests, not by users of BLIPWebSocket.
        .target(
            name: "BLIPInspection",
            dependencies: [
                "BLIPWebSocket", "BLIP", "BLIPWire", nioCore, nioPosix, nioLocks, nioHTTP1, nioWebSocket, nioSSL, crypto,
                logging, httpTypes,
            ],
            swiftSettings: swiftSettings
        ),
        .target(
            name: "BLIPHummingbird",
            dependencies: [
                "BLIPWebSocket", "BLIP", nioCore, nioHTTP1, nioWebSocket, nioHTTPTypes, nioHTTPTypesHTTP1, httpTypes,
                hummingbird, hummingbirdCore, logging, serviceLifecycle,
            ],
            swiftSettings: swiftSettings
        ),
        .executableTarget(
            name: "BLIPTool",
            dependencies: [
                "BLIPWebSocket", "BLIPWebBridge", "BLIPInspection", "BLIP", "BLIPWire", nioCore, nioPosix, nioLocks, crypto,
                logging, serviceLifecycle,
                unixSignals,
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            resources: [.embedInCode("Resources/web-demo.html")],
            swiftSettings: swiftSettings
        ),
        // libFuzzer entry points; a normal build replays the corpus (see Docs/Testing.md).
        .executableTarget(
            name: "BLIPFuzz",
            dependencies: ["BLIPWire", "BLIPEngine", "BLIPPeerHarness", "BLIP", nioCore, deque],
            swiftSettings: swiftSettings
        ),
        // Test helpers shared by the test targets (a gate for handlers, a bounded poll).
        .target(
            name: "BLIPTestSupport",
            dependencies: ["BLIP", nioCore, nioLocks, logging, httpTypes],
            path: "Tests/BLIPTestSupport",
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BLIPWireTests",
            dependencies: ["BLIPWire", "CBLIPZlib", nioCore, propertyBased, crypto],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BLIPEngineTests",
            dependencies: ["BLIPEngine", "BLIPPeerHarness", "BLIPWire", nioCore, propertyBased],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BLIPTests",
            dependencies: [
                "BLIP", "BLIPEngine", "BLIPPeerHarness", "BLIPWire", "BLIPTestSupport", nioCore, nioLocks, logging,
                tracing,
                .product(name: "InMemoryTracing", package: "swift-distributed-tracing"),
                .product(name: "NIOEmbedded", package: "swift-nio"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BLIPWebSocketTests",
            dependencies: [
                "BLIPWebSocket", "BLIPWebBridge", "BLIPInspection", "BLIP", "BLIPWire", "BLIPTestSupport", nioCore, nioPosix,
                nioLocks, nioHTTP1, nioWebSocket, nioSSL, crypto, logging, serviceLifecycle, .product(name: "NIOEmbedded", package: "swift-nio"),
                .product(name: "ServiceLifecycleTestKit", package: "swift-service-lifecycle"),
            ],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BLIPHummingbirdTests",
            dependencies: [
                "BLIPHummingbird", "BLIPWebSocket", "BLIP", "BLIPTestSupport", nioCore, nioPosix, nioHTTP1, httpTypes,
                hummingbird, hummingbirdCore, logging, serviceLifecycle,
            ],
            swiftSettings: swiftSettings
        ),
        // What a user of the library has: BLIP and BLIPWebSocket, nothing of NIO. Its tests fail to compile
        // if a body, a time, a header or a credential needs another import.
        .testTarget(
            name: "BLIPUserImportTests",
            dependencies: ["BLIP", "BLIPWebSocket"],
            swiftSettings: swiftSettings
        ),
        // The DocC articles' Swift samples, each compiled and run (SampleCatalogueTests checks they are the
        // articles' own, line for line).
        .testTarget(
            name: "BLIPDocSampleTests",
            dependencies: [
                "BLIP", "BLIPWebSocket", "BLIPWebBridge", "BLIPHummingbird", hummingbird, nioCore, nioPosix, nioLocks,
                logging, serviceLifecycle, unixSignals,
            ],
            exclude: ["Pending.txt"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BLIPFuzzTests",
            dependencies: ["BLIPFuzz"],
            swiftSettings: swiftSettings
        ),
        .testTarget(
            name: "BLIPToolTests",
            dependencies: [
                "BLIPTool", "BLIPWebSocket", "BLIPWebBridge", "BLIPInspection", "BLIP", "BLIPTestSupport", "BLIPPeerHarness",
                nioCore, nioPosix, nioLocks,
                .product(name: "ArgumentParser", package: "swift-argument-parser"),
            ],
            swiftSettings: swiftSettings
        ),
    ],
    swiftLanguageModes: [.v6]
)

// Benchmarks stay out of normal resolution and builds: `ENABLE_BLIP_BENCHMARKS=1 swift package benchmark`.
if Context.environment["ENABLE_BLIP_BENCHMARKS"] != nil {
    package.dependencies.append(
        .package(url: "https://github.com/ordo-one/benchmark.git", from: "1.38.0", traits: ["MallocInterposer"])
    )
    package.targets.append(
        .executableTarget(
            name: "BLIPBenchmarks",
            dependencies: [
                "BLIPWire", "BLIPEngine", "BLIP", "CBLIPZlib", nioCore,
                .product(name: "Benchmark", package: "benchmark"),
            ],
            path: "Tests/Benchmarks/BLIPBenchmarks",
            swiftSettings: swiftSettings,
            plugins: [.plugin(name: "BenchmarkPlugin", package: "benchmark")]
        )
    )
}
