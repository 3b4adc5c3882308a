// swift-tools-version: 6.0
// BigPeer: the server side of an offline-first, peer-to-peer document database.
// Module map and dependency direction: docs/ARCHITECTURE.md (and ../shared/DESIGN.md).
// No SwiftNIO anywhere in this graph: scripts/check-no-nio.sh proves it in CI.
import PackageDescription

// Swift 6 language mode (tools 6.0) keeps strict concurrency checking on for every target.
let strict: [SwiftSetting] = [.enableUpcomingFeature("ExistentialAny")]

let package = Package(
    name: "BigPeer",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "bigpeer", targets: ["bigpeer"]),
        .library(name: "SmallPeer", targets: ["SmallPeer"]),
        // Library products for the benchmark packages under Benchmarks/ (they depend on this one by path).
        .library(name: "HTTP", targets: ["HTTP"]),
        .library(name: "Sockets", targets: ["Sockets"]),
        .library(name: "CRDT", targets: ["CRDT"]),
        .library(name: "DQL", targets: ["DQL"]),
        .library(name: "Values", targets: ["Values"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
    ],
    targets: [
        // System libraries (module maps + pkg-config).
        .systemLibrary(name: "CLibPQ", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "CZlib", pkgConfig: "zlib", providers: [.apt(["zlib1g-dev"])]),
        .systemLibrary(name: "COpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"])]),
        // Header-only shim: Glibc does not expose epoll/eventfd/timerfd.
        .target(name: "CEpoll"),

        // Pure value layer: JSON-like values, JSON and CBOR codecs.
        .target(name: "Values", swiftSettings: strict),
        // Transport.
        .target(name: "Sockets", dependencies: ["CEpoll", "COpenSSL"], swiftSettings: strict),
        .target(name: "HTTP", dependencies: ["Sockets", .product(name: "Logging", package: "swift-log")], swiftSettings: strict),
        .target(name: "WebSocket", dependencies: ["HTTP", "CZlib", "COpenSSL"], swiftSettings: strict),
        // Pure data model and language.
        .target(name: "CRDT", dependencies: ["Values"], swiftSettings: strict),
        .target(name: "DQL", dependencies: ["Values", "CRDT"], swiftSettings: strict),
        // Storage.
        .target(name: "Postgres", dependencies: ["CLibPQ", "Sockets", .product(name: "Logging", package: "swift-log")], swiftSettings: strict),
        .target(name: "Store", dependencies: ["Postgres", "CRDT", "DQL", "Values"], swiftSettings: strict),
        // Replication, local node, auth.
        .target(name: "Sync", dependencies: ["Store", "CRDT", "DQL", "Values"], swiftSettings: strict),
        .target(name: "Mesh", dependencies: ["Sockets", "Sync"], swiftSettings: strict),
        .target(name: "Auth", dependencies: ["HTTP", "COpenSSL", "DQL"], swiftSettings: strict),
        // Wiring and clients.
        .target(
            name: "BigPeerServer",
            dependencies: ["Sockets", "HTTP", "WebSocket", "Postgres", "Store", "Sync", "Auth", "Values",
                           .product(name: "Logging", package: "swift-log")],
            swiftSettings: strict),
        .target(name: "SmallPeer", dependencies: ["CRDT", "DQL", "Sync", "WebSocket", "Values"], swiftSettings: strict),
        .executableTarget(
            name: "bigpeer",
            dependencies: ["BigPeerServer", "Postgres", "SmallPeer",
                           .product(name: "ArgumentParser", package: "swift-argument-parser"),
                           .product(name: "Logging", package: "swift-log")],
            swiftSettings: strict),

        // Shared test helpers: PostgreSQL harness, ports, clocks.
        .target(name: "BigPeerTestSupport", dependencies: ["Postgres", "Store", "BigPeerServer"], swiftSettings: strict),

        .testTarget(name: "ValuesTests", dependencies: ["Values"], swiftSettings: strict),
        .testTarget(name: "SocketsTests", dependencies: ["Sockets", "BigPeerTestSupport"], swiftSettings: strict),
        .testTarget(name: "HTTPTests", dependencies: ["HTTP", "BigPeerTestSupport"], swiftSettings: strict),
        .testTarget(name: "WebSocketTests", dependencies: ["WebSocket", "HTTP", "BigPeerTestSupport"], swiftSettings: strict),
        .testTarget(name: "CRDTTests", dependencies: ["CRDT", "Values"], swiftSettings: strict),
        .testTarget(name: "DQLTests", dependencies: ["DQL", "Values"], swiftSettings: strict),
        .testTarget(name: "StoreTests", dependencies: ["Store", "DQL", "CRDT", "Values", "Postgres", "BigPeerTestSupport"], swiftSettings: strict),
        .testTarget(name: "PostgresTests", dependencies: ["Postgres", "BigPeerTestSupport"], swiftSettings: strict),
        .testTarget(name: "SyncTests", dependencies: ["Sync", "Store", "CRDT", "DQL", "Values", "Postgres", "BigPeerTestSupport"], swiftSettings: strict),
        .testTarget(name: "BigPeerServerTests", dependencies: ["BigPeerServer", "BigPeerTestSupport"], swiftSettings: strict),
    ]
)
