// swift-tools-version: 6.2
// Benchmark-only comparison server: a Hummingbird 2 WebSocket echo (hummingbird-websocket, with
// permessage-deflate offered) for Benchmarks/ws.sh. Never a dependency of BigPeer.
import PackageDescription

let package = Package(
    name: "HummingbirdWSEcho",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.0.0"),
        .package(url: "https://github.com/hummingbird-project/hummingbird-websocket", from: "2.0.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
    ],
    targets: [
        .executableTarget(name: "HummingbirdWSEcho", dependencies: [
            .product(name: "Hummingbird", package: "hummingbird"),
            .product(name: "HummingbirdWebSocket", package: "hummingbird-websocket"),
            .product(name: "HummingbirdWSCompression", package: "hummingbird-websocket"),
            .product(name: "Logging", package: "swift-log"),
        ]),
    ]
)
