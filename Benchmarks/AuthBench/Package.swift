// swift-tools-version: 6.0
// JWT verification cost (#21: RS256 with a cached key ≤ 30 µs). Run from this folder:
//   swift run -c release --scratch-path .build-auth-bench AuthBench
import PackageDescription

let package = Package(
    name: "AuthBench",
    platforms: [.macOS(.v15)],
    dependencies: [.package(name: "BigPeer", path: "../..")],
    targets: [
        .executableTarget(name: "AuthBench", dependencies: [.product(name: "Auth", package: "BigPeer")]),
    ]
)
