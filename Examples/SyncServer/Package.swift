// swift-tools-version: 6.1
import PackageDescription

// An example sync server: a Hummingbird application with a REST route and a BLIP endpoint behind Basic
// authentication. Its own package, so that the library's build does not carry it.
let package = Package(
    name: "SyncServer",
    platforms: [.macOS(.v15)],
    dependencies: [
        .package(name: "swift-blip", path: "../.."),
        .package(url: "https://github.com/hummingbird-project/hummingbird.git", from: "2.28.0", traits: []),
    ],
    targets: [
        .executableTarget(
            name: "SyncServer",
            dependencies: [
                .product(name: "BLIPHummingbird", package: "swift-blip"),
                .product(name: "BLIPWebSocket", package: "swift-blip"),
                .product(name: "BLIP", package: "swift-blip"),
                .product(name: "Hummingbird", package: "hummingbird"),
            ],
            swiftSettings: [.enableUpcomingFeature("ExistentialAny")]
        )
    ],
    swiftLanguageModes: [.v6]
)
