// swift-tools-version: 6.0
// Benchmark-only comparison server (Hummingbird 2 hello world). Never a dependency of BigPeer.
import PackageDescription

let package = Package(
    name: "HummingbirdHello",
    platforms: [.macOS(.v14)],
    dependencies: [
        .package(url: "https://github.com/hummingbird-project/hummingbird", from: "2.0.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
    ],
    targets: [
        .executableTarget(name: "HummingbirdHello", dependencies: [.product(name: "Hummingbird", package: "hummingbird"), .product(name: "Logging", package: "swift-log")]),
    ]
)
