// swift-tools-version: 6.0
// A tiny server over BigPeer's HTTP module, for Benchmarks/http.sh. Not part of the product.
import Foundation
import PackageDescription

// A path dependency's identity is its folder name (the checkout may be called anything).
let rootIdentity = URL(fileURLWithPath: #filePath).deletingLastPathComponent()
    .appendingPathComponent("../..").standardized.lastPathComponent.lowercased()

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
                .product(name: "HTTP", package: rootIdentity),
                .product(name: "Logging", package: "swift-log"),
            ]),
    ]
)
