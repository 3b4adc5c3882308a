// swift-tools-version: 6.0
// libFuzzer harness for the WebSocket frame parser (see WSFrameFuzz.swift for the command).
// A separate package so sanitizer flags never touch the product build.
import PackageDescription

let package = Package(
    name: "WSFrameFuzz",
    platforms: [.macOS(.v15)],
    dependencies: [.package(name: "BigPeer", path: "../..")],
    targets: [
        .executableTarget(
            name: "ws-frame-fuzz",
            dependencies: [
                .product(name: "WebSocket", package: "BigPeer"),
                .product(name: "Sockets", package: "BigPeer"),
            ],
            path: ".",
            exclude: ["Package.swift"],
            sources: ["WSFrameFuzz.swift"]),
    ]
)
