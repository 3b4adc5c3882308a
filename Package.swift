// swift-tools-version: 6.0
// BigPeer: the server side of an offline-first, peer-to-peer document database.
// Module map and dependency direction: docs/ARCHITECTURE.md (and ../shared/DESIGN.md).
// No SwiftNIO anywhere in this graph: scripts/check-no-nio.sh proves it in CI.
import PackageDescription

// Swift 6 language mode (tools 6.0) keeps strict concurrency checking on for every target.
// MemberImportVisibility (SE-0444): a file sees only the members of modules it imports itself, so
// each file's imports, and each target's dependencies below, say what it uses.
let strict: [SwiftSetting] = [.enableUpcomingFeature("ExistentialAny"), .enableUpcomingFeature("MemberImportVisibility")]

let package = Package(
    name: "BigPeer",
    platforms: [.macOS(.v15)],
    products: [
        .executable(name: "bigpeer", targets: ["bigpeer"]),
        .library(name: "SmallPeer", targets: ["SmallPeer"]),
        // Library products for the benchmark packages under Benchmarks/ (they depend on this one by path).
        .library(name: "HTTP", targets: ["HTTP"]),
        .library(name: "Sockets", targets: ["Sockets"]),
        .library(name: "Auth", targets: ["Auth"]),
        .library(name: "CRDT", targets: ["CRDT"]),
        .library(name: "DQL", targets: ["DQL"]),
        .library(name: "Values", targets: ["Values"]),
        .library(name: "WebSocket", targets: ["WebSocket"]),
    ],
    dependencies: [
        .package(url: "https://github.com/apple/swift-argument-parser", from: "1.5.0"),
        .package(url: "https://github.com/apple/swift-log", from: "1.6.0"),
        // YAML for `serve --config` (libyaml inside, no dependencies of its own).
        .package(url: "https://github.com/jpsim/Yams", from: "6.2.2"),
    ],
    targets: [
        // System libraries (module maps + pkg-config).
        .systemLibrary(name: "CLibPQ", pkgConfig: "libpq", providers: [.apt(["libpq-dev"])]),
        .systemLibrary(name: "CZlib", pkgConfig: "zlib", providers: [.apt(["zlib1g-dev"])]),
        .systemLibrary(name: "COpenSSL", pkgConfig: "openssl", providers: [.apt(["libssl-dev"])]),
        // Header-only shim: Glibc does not expose epoll/eventfd/timerfd.
        .target(name: "CEpoll"),
        .target(name: "CThreads"),
        // The commit and date a release build was made from (`bigpeer version`; -Xcc -D... at build).
        .target(name: "CBuildInfo"),

        // Byte-wise quoting of SQL and DQL names and literals: the one place it is done.
        .target(name: "Quoting", swiftSettings: strict),
        // Pure value layer: JSON-like values, JSON and CBOR codecs.
        .target(name: "Values", swiftSettings: strict),
        // Transport.
        .target(name: "Sockets", dependencies: ["CEpoll", "CThreads", "COpenSSL"], swiftSettings: strict),
        // Counters, gauges and histograms as relaxed atomics in cells allocated once; the Prometheus text format.
        .target(name: "CAtomicCounters"),
        .target(name: "Metrics", dependencies: ["CAtomicCounters", "Sockets"], swiftSettings: strict),
        .target(name: "HTTP", dependencies: ["Sockets", "Metrics", .product(name: "Logging", package: "swift-log")], swiftSettings: strict),
        .target(name: "WebSocket", dependencies: ["HTTP", "Sockets", "CZlib", "COpenSSL", "Values"], swiftSettings: strict),
        // Pure data model and language.
        .target(name: "CRDT", dependencies: ["Values"], swiftSettings: strict),
        .target(name: "DQL", dependencies: ["Values", "CRDT", "Quoting", "CThreads"], swiftSettings: strict),
        // Storage.
        .target(name: "Postgres", dependencies: ["CLibPQ", "Sockets", "Quoting", "Metrics"], swiftSettings: strict),
        // BigPeer's schema: the migrations the binary carries (server and test harness alike).
        .target(name: "Migrations", dependencies: ["Postgres"], swiftSettings: strict),
        // The store implements Sync's `SyncStorage` (DocumentSyncStorage): it sees Sync, not the reverse.
        .target(name: "Store", dependencies: ["Postgres", "Sockets", "CRDT", "DQL", "Values", "Quoting", "COpenSSL", "Sync", "SyncProtocol", "Metrics"], swiftSettings: strict),
        // Replication and auth.
        // The sync wire protocol alone (messages, CBOR codec, framing): what any peer links.
        .target(name: "SyncProtocol", dependencies: ["Values", "COpenSSL"], swiftSettings: strict),
        // The serving side of sync sessions over any `SyncStorage`: BigPeer's store or a small peer's.
        .target(name: "Sync", dependencies: ["SyncProtocol", "CRDT", "DQL", "Values"], swiftSettings: strict),
        .target(name: "Auth", dependencies: ["COpenSSL", "DQL", "HTTP", "Postgres", "Values"], swiftSettings: strict),
        // Which peers may sync: rules from a policy file and a connection webhook, for every link type.
        .target(name: "ConnectionPolicy", dependencies: ["HTTP", "Sockets", "SyncProtocol", "Values"], swiftSettings: strict),
        // Wiring and clients.
        .target(
            name: "BigPeerServer",
            dependencies: ["Sockets", "Metrics", "HTTP", "WebSocket", "Postgres", "Migrations", "Store", "Sync", "SyncPeer", "SyncProtocol", "Upstream", "LANDiscovery", "Discovery", "BLEDiscovery", "Auth", "ConnectionPolicy", "CRDT", "DQL", "Quoting", "Values",
                           .product(name: "Logging", package: "swift-log")],
            swiftSettings: strict),
        // The peer side of a sync session (sans-I/O) and the reconnecting WebSocket link it runs
        // on: what a small peer and a local node's upstream replicator both drive.
        .target(name: "LANDiscovery", dependencies: ["Discovery", "Sockets", .product(name: "Logging", package: "swift-log")], swiftSettings: strict),
        .target(name: "SyncPeer", dependencies: ["SyncProtocol", "WebSocket", "Sockets", "Values"], swiftSettings: strict),
        // A local node's replication with its upstream BigPeer: a sync peer with this server's store behind it.
        .target(name: "Upstream", dependencies: ["Store", "Postgres", "SyncPeer", "SyncProtocol", "CRDT", "DQL", "Sockets", "Values",
                                                 .product(name: "Logging", package: "swift-log")], swiftSettings: strict),
        // LAN discovery: the sans-I/O mDNS/DNS-SD codec, responder and browser (RFC 6762/6763); the
        // socket layer that drives them lives with whoever owns the event loop.
        .target(name: "Discovery", swiftSettings: strict),
        // The D-Bus wire protocol without I/O: type system, marshalling, messages, SASL EXTERNAL.
        .target(name: "DBus", swiftSettings: strict),
        // Being found over BLE: a D-Bus connection on our event loops, BlueZ advertisement and GATT
        // registration (the PSM for phones), and the scanner for other nodes' advertisements.
        .target(name: "BLEDiscovery", dependencies: ["DBus", "Sockets", .product(name: "Logging", package: "swift-log")], swiftSettings: strict),
        // A layered configuration: a YAML file, BIGPEER_* variables and the command line, in that order.
        .target(name: "ConfigFile", dependencies: [.product(name: "Yams", package: "Yams")], swiftSettings: strict),
        .target(name: "SmallPeer", dependencies: ["CRDT", "DQL", "Sync", "SyncProtocol", "SyncPeer", "Sockets", "Values"], swiftSettings: strict),
        .executableTarget(
            name: "bigpeer",
            dependencies: ["BigPeerServer", "CBuildInfo", "ConfigFile", "Metrics", "BLEDiscovery", "Auth", "DQL", "ConnectionPolicy", "Postgres", "SmallPeer", "Sync", "Upstream", "CRDT", "Values", "HTTP", "Sockets", "SyncProtocol", "WebSocket",
                           .product(name: "ArgumentParser", package: "swift-argument-parser"),
                           .product(name: "Logging", package: "swift-log")],
            swiftSettings: strict),

        // Seeded randomness for every test target (no dependencies).
        .target(name: "TestRandomness", swiftSettings: strict),
        // Shared test helpers: PostgreSQL harness, ports, clocks, `eventually`, REST and sync clients.
        .target(name: "BigPeerTestSupport", dependencies: ["TestRandomness", "Postgres", "Migrations", "HTTP", "Values", "Sockets", "WebSocket", "SyncProtocol",
                                                   .product(name: "Logging", package: "swift-log")], swiftSettings: strict),
        // The in-process server harness: apart, so a socket or PostgreSQL test does not compile the server.
        .target(name: "ServerTestSupport", dependencies: ["BigPeerTestSupport", "BigPeerServer", "Auth", "HTTP", "Postgres", "Values"], swiftSettings: strict),

        .testTarget(name: "ValuesTests", dependencies: ["TestRandomness", "Values"], swiftSettings: strict),
        .testTarget(name: "SocketsTests", dependencies: ["TestRandomness", "Sockets", "CEpoll", "CThreads", "BigPeerTestSupport"], swiftSettings: strict),
        .testTarget(name: "ConfigFileTests", dependencies: ["TestRandomness", "ConfigFile", "bigpeer", "BigPeerTestSupport", "Sockets", .product(name: "Yams", package: "Yams"), .product(name: "Logging", package: "swift-log"),
                                                          .product(name: "ArgumentParser", package: "swift-argument-parser")], swiftSettings: strict),
        .testTarget(name: "MetricsTests", dependencies: ["Metrics", "HTTP", "Sockets", "BigPeerServer", "BigPeerTestSupport", "Postgres", "Values",
                                                       .product(name: "Logging", package: "swift-log")], swiftSettings: strict),
        .testTarget(name: "HTTPTests", dependencies: ["TestRandomness", "HTTP", "Sockets", "BigPeerTestSupport", .product(name: "Logging", package: "swift-log")], swiftSettings: strict),
        .testTarget(name: "WebSocketTests", dependencies: ["TestRandomness", "WebSocket", "HTTP", "Sockets", "CZlib", "BigPeerTestSupport",
                                                          .product(name: "Logging", package: "swift-log")], swiftSettings: strict),
        .testTarget(name: "CRDTTests", dependencies: ["TestRandomness", "CRDT", "Values"], swiftSettings: strict),
        .testTarget(name: "DQLTests", dependencies: ["TestRandomness", "DQL", "Values", "Quoting"], swiftSettings: strict),
        .testTarget(name: "StoreTests", dependencies: ["TestRandomness", "Store", "DQL", "CThreads", "CRDT", "Values", "Postgres", "Quoting", "SyncProtocol", "BigPeerTestSupport"], swiftSettings: strict),
        .testTarget(name: "PostgresTests", dependencies: ["TestRandomness", "Postgres", "Quoting", "Sockets", "BigPeerTestSupport"], swiftSettings: strict),
        .testTarget(name: "SyncTests", dependencies: ["TestRandomness", "Sync", "SyncPeer", "SyncProtocol", "Store", "CRDT", "DQL", "Values", "Postgres", "Sockets", "BigPeerTestSupport"], swiftSettings: strict),
        .testTarget(name: "AuthTests", dependencies: ["TestRandomness", "Auth", "Metrics", "BigPeerServer", "BigPeerTestSupport", "ServerTestSupport", "DQL", "HTTP", "CRDT", "Postgres", "Sockets", "Store", "SyncProtocol", "Values"], swiftSettings: strict),
        .testTarget(name: "UpstreamTests", dependencies: ["TestRandomness", "Upstream", "SyncPeer", "SmallPeer", "Store", "SyncProtocol", "Values", "HTTP",
                                                          "Postgres", "Sockets", "BigPeerTestSupport"], swiftSettings: strict),
        .testTarget(name: "ConnectionPolicyTests", dependencies: ["TestRandomness", "ConnectionPolicy", "HTTP", "Sockets", "SyncProtocol", "Values", "BigPeerTestSupport",
                                                                  .product(name: "Logging", package: "swift-log")], swiftSettings: strict),
        .testTarget(name: "DiscoveryTests", dependencies: ["TestRandomness", "Discovery"], swiftSettings: strict),
        .testTarget(name: "DBusTests", dependencies: ["TestRandomness", "DBus"], swiftSettings: strict),
        .testTarget(name: "BLEDiscoveryTests", dependencies: ["BLEDiscovery", "DBus", "Sockets", "SyncPeer", "HTTP", "BigPeerTestSupport", "ServerTestSupport", "BigPeerServer",
                                                             .product(name: "Logging", package: "swift-log")],
                    exclude: ["fake_bluez.py"], swiftSettings: strict),
        .testTarget(name: "LANDiscoveryTests", dependencies: ["TestRandomness", "LANDiscovery", "Discovery", "Sockets", "BigPeerTestSupport",
                                                             .product(name: "Logging", package: "swift-log")], swiftSettings: strict),
        .testTarget(name: "SyncPeerTests", dependencies: ["TestRandomness", "SyncPeer", "SyncProtocol", "Sockets", "Values", "BigPeerTestSupport", "HTTP", "WebSocket"], swiftSettings: strict),
        .testTarget(name: "SmallPeerTests", dependencies: ["TestRandomness", "SmallPeer", "Sync", "SyncPeer", "SyncProtocol", "Sockets", "CRDT", "DQL", "Values", "BigPeerTestSupport", "ServerTestSupport",
                                                           "BigPeerServer", "Auth", "HTTP", "Postgres"], swiftSettings: strict),
        .testTarget(name: "BigPeerServerTests", dependencies: ["TestRandomness", "BigPeerServer", "BigPeerTestSupport", "ServerTestSupport", "Auth", "ConnectionPolicy", "CRDT", "DQL", "HTTP", "LANDiscovery", "Migrations",
                                                             "Metrics", "Postgres", "Sockets", "Store", "SyncPeer", "SyncProtocol", "Values", "WebSocket",
                                                             .product(name: "Logging", package: "swift-log")], swiftSettings: strict),
    ]
)
