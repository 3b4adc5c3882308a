// swift-tools-version: 6.0
// A compiled WebSocket load client for Benchmarks/ws.sh: our own client adapter on our own epoll
// loops (no NIO), so the client is not the bottleneck the Python one was. Benchmark-only: it
// depends on the root package by path and is never a dependency of BigPeer.
import PackageDescription

let package = Package(
    name: "WSLoad",
    platforms: [.macOS(.v15)],
    dependencies: [.package(name: "BigPeer", path: "../..")],
    targets: [
        .executableTarget(
            name: "ws-load",
            dependencies: [
                .product(name: "WebSocket", package: "BigPeer"),
                .product(name: "Sockets", package: "BigPeer"),
            ],
            path: "Sources/ws-load"),
    ]
)
