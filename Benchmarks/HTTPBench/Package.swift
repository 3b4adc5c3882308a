// swift-tools-version: 6.0
// A tiny server over BigPeer's HTTP module, for Benchmarks/http.sh. Not part of the product.
import PackageDescription

let package = Package(
    name: "HTTPBench",
    dependencies: [
        .package(path: "../.."),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
    ],
    targets: [
        .executableTarget(
            name: "HTTPBench",
            dependencies: [
                .product(name: "HTTP", package: "BigPeer"),
                .product(name: "Logging", package: "swift-log"),
            ]),
    ]
)
