// libFuzzer entry for the mDNS/DNS-SD codec and state machines (Sources/Discovery).
// Build and run with `scripts/fuzz.sh DNSMessage <seconds>`; Discovery has no dependencies, so
// only its sources are compiled in. Through the script (2026-11-26, shared 2-core machine): two
// runs of 120 s, ~541k and ~669k inputs, no finding.
//
// Oracles beyond "does not crash": a message that decodes re-encodes to bytes that decode to the
// same message; the same bytes given to an established responder and to a browser produce a
// bounded number of actions, and the browser's cache stays within its bound.

import Discovery

#if canImport(Glibc)
import Glibc
#endif

private func check(_ condition: Bool, _ message: String) {
    if !condition {
        fputs("fuzz oracle failed: \(message)\n", stderr)
        abort()
    }
}

private let serviceType = (try? DNSName("_bigpeer._tcp.local")) ?? .root
private let interface = InterfaceID(2)
private let source = Endpoint(address: .v4(0x0A00_0009), port: mdnsPort)

/// A responder with one service, probed and announced on one interface, and what it sent.
private func establishedResponder() -> (responder: MDNSResponder, sent: [[UInt8]])? {
    var sent: [[UInt8]] = []
    guard var responder = try? MDNSResponder(configuration: MDNSResponderConfiguration(hostName: "node-1")),
          let txt = try? TXTRecord([("v", "1"), ("role", "node")]),
          (try? responder.register(MDNSService(instanceName: "Ship Node", serviceType: serviceType, port: 4040, txt: txt), now: 0)) != nil
    else { return nil }
    _ = responder.setInterface(interface, addresses: [.v4(0x0A00_0001), .v6(high: 0xFE80 << 48, low: 1)], now: 0)
    while let next = responder.nextWakeup, next <= 5000 {
        for case let .send(packet) in responder.tick(now: next) { sent.append(packet.bytes) }
    }
    return (responder, sent)
}

/// Built once; every input gets a copy (the responder is a value).
private let baseline = establishedResponder()

@_cdecl("LLVMFuzzerInitialize")
public func fuzzInitialize(_ argc: UnsafeMutablePointer<CInt>, _ argv: UnsafeMutablePointer<UnsafeMutablePointer<UnsafeMutablePointer<CChar>?>>) -> CInt {
    // `CRDT_FUZZ_SEEDS=dir` (the variable scripts/fuzz.sh sets) writes the responder's probes and
    // announcements, an answer and a query there.
    guard let dir = getenv("CRDT_FUZZ_SEEDS"), var responder = baseline?.responder else { return 0 }
    var seeds = baseline?.sent ?? []
    let question = DNSMessage(header: .query(), questions: [DNSQuestion(name: serviceType, type: .ptr, unicastResponse: true)])
    if let bytes = try? question.encoded() {
        seeds.append(bytes)
        let packet = ReceivedPacket(bytes: bytes, interface: interface, source: source)
        for case let .send(answer) in responder.receive(packet, now: 10_000) { seeds.append(answer.bytes) }
    }
    for (i, bytes) in seeds.enumerated() {
        if let f = fopen(String(cString: dir) + "/seed\(i)", "wb") {
            _ = bytes.withUnsafeBufferPointer { fwrite($0.baseAddress, 1, $0.count, f) }
            fclose(f)
        }
    }
    return 0
}

@_cdecl("LLVMFuzzerTestOneInput")
public func fuzzOne(_ data: UnsafePointer<UInt8>, _ size: Int) -> CInt {
    let bytes = Array(UnsafeBufferPointer(start: data, count: size))
    if let message = try? DNSMessage(decoding: bytes), let encoded = try? message.encoded() {
        let again = try? DNSMessage(decoding: encoded)
        check(again == message, "a decoded message changed in a round trip")
    }
    check(baseline != nil, "the responder could not be set up")
    guard var responder = baseline?.responder else { return 0 }
    let packet = ReceivedPacket(bytes: bytes, interface: interface, source: source)
    check(responder.receive(packet, now: 10_000).count <= 8, "one packet made the responder act more than 8 times")
    check(responder.tick(now: 10_500).count <= 16, "one tick made the responder act more than 16 times")
    var configuration = MDNSBrowserConfiguration(serviceType: serviceType)
    configuration.cacheLimit = 16
    var browser = MDNSBrowser(configuration: configuration)
    browser.addInterface(interface, now: 0)
    _ = browser.receive(packet, now: 10_000)
    check(browser.cachedRecordCount <= 16, "the browser cache passed its bound")
    check(browser.tick(now: 10_500).count <= 64, "one tick made the browser act more than 64 times")
    return 0
}
