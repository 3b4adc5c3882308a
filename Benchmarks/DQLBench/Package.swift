// swift-tools-version: 6.0
// Micro-benchmarks for DQL and the JSON codec. Run from this folder:
//   swift run -c release --scratch-path .build-dql-bench DQLBench
import PackageDescription

let package = Package(
    name: "DQLBench",
    platforms: [.macOS(.v15)],
    dependencies: [.package(name: "BigPeer", path: "../..")],
    targets: [
        .executableTarget(
            name: "DQLBench",
            dependencies: [.product(name: "DQL", package: "BigPeer"), .product(name: "Values", package: "BigPeer")]),
    ]
)
