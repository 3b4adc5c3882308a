// swift-tools-version: 6.0
// CRDT measurements for docs/PERFORMANCE.md ("CRDT" section). Separate package so the main
// package does not change for it: `cd Benchmarks/CRDTBench && swift run -c release CRDTBench`.
import PackageDescription

let package = Package(
    name: "CRDTBench",
    platforms: [.macOS(.v15)],
    dependencies: [.package(name: "BigPeer", path: "../..")],  // name: the identity would otherwise be the checkout folder
    targets: [
        .executableTarget(
            name: "CRDTBench",
            dependencies: [.product(name: "CRDT", package: "BigPeer"), .product(name: "Values", package: "BigPeer"), "CMallocStats"]),
        .target(name: "CMallocStats"),
    ]
)
