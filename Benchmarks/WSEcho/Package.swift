// swift-tools-version: 6.0
// A throwaway WebSocket echo host for conformance runs (Autobahn fuzzingclient) and interop
// tests, until the real HTTP server wires the WebSocket layer into `/api/v4/_echo`.
// Not part of the product: it lives in its own package and depends on the root by path.
import PackageDescription

let package = Package(
    name: "WSEcho",
    platforms: [.macOS(.v15)],
    dependencies: [.package(name: "BigPeer", path: "../..")],
    targets: [
        .executableTarget(
            name: "ws-echo",
            dependencies: [
                .product(name: "WebSocket", package: "BigPeer"),
                .product(name: "Sockets", package: "BigPeer"),
            ],
            path: "Sources/WSEcho"),
        .target(
            name: "WSBlockingClient",
            dependencies: [
                .product(name: "WebSocket", package: "BigPeer"),
                .product(name: "Sockets", package: "BigPeer"),
            ],
            path: "Sources/WSBlockingClient"),
        .executableTarget(
            name: "ws-autobahn-client",
            dependencies: ["WSBlockingClient", .product(name: "WebSocket", package: "BigPeer")],
            path: "Sources/WSAutobahnClient"),
        .executableTarget(
            name: "ws-interop-client",
            dependencies: ["WSBlockingClient", .product(name: "WebSocket", package: "BigPeer")],
            path: "Sources/WSInteropClient"),
        .executableTarget(
            name: "ws-codec-bench",
            dependencies: [
                .product(name: "WebSocket", package: "BigPeer"),
                .product(name: "Sockets", package: "BigPeer"),
            ],
            path: "Sources/WSCodecBench"),
    ]
)
