// Helpers shared by the Discovery tests: names, packets in and out, and real packets from
// python-zeroconf 0.154.0 (generated once with its DNSOutgoing; the tests need no Python).
@testable import Discovery
import TestRandomness

func name(_ text: String) -> DNSName {
    // Test literals are valid names; a bad one fails the test that uses it via the root name.
    (try? DNSName(text)) ?? .root
}

func hex(_ text: String) -> [UInt8] {
    var bytes: [UInt8] = []
    var index = text.startIndex
    while index < text.endIndex {
        let next = text.index(index, offsetBy: 2)
        bytes.append(UInt8(text[index..<next], radix: 16) ?? 0)
        index = next
    }
    return bytes
}

let bigpeerType = name("_bigpeer._tcp.local.")

enum ZeroconfFixture {
    /// A response: PTR `_bigpeer._tcp.local.` → `Ship Node._bigpeer._tcp.local.` (4500 s), SRV
    /// (cache-flush, 120 s, port 4040, target `node-1.local.`), TXT `v=1`, `role=node`; additional A
    /// 192.168.7.20 and NSEC `node-1.local.` [A], its next name compressed.
    static let response = hex("000084000000000300000002085f62696770656572045f746370056c6f63616c00000c000100001194000c0953686970204e6f6465c00cc02b0021800100000078000f000000000fc8066e6f64652d31c01ac02b0010800100001194000e03763d3109726f6c653d6e6f6465c04900018001000000780004c0a80714c049002f8001000000780005c049000140")
    /// A probe: QU question ANY `Ship Node._bigpeer._tcp.local.`, authority SRV → node-1.local.:4040.
    static let probe = hex("0000000000010000000100000953686970204e6f6465085f62696770656572045f746370056c6f63616c0000ff8001c00c0021000100000078000f000000000fc8066e6f64652d31c024")
    /// A browse query: PTR `_bigpeer._tcp.local.` with one known answer (4500 s).
    static let browse = hex("000000000001000100000000085f62696770656572045f746370056c6f63616c00000c0001c00c000c000100001194000c0953686970204e6f6465c00c")
}

let ifA = InterfaceID(2)
let ifB = InterfaceID(3)

func v4(_ a: UInt8, _ b: UInt8, _ c: UInt8, _ d: UInt8) -> IPAddress { .v4(UInt32(a) << 24 | UInt32(b) << 16 | UInt32(c) << 8 | UInt32(d)) }

func packet(_ message: DNSMessage, on interface: InterfaceID = ifA, from source: Endpoint = Endpoint(address: v4(10, 0, 0, 99), port: 5353),
            viaMulticast: Bool = true) -> ReceivedPacket {
    ReceivedPacket(bytes: (try? message.encoded()) ?? [], interface: interface, source: source, viaMulticast: viaMulticast)
}

/// The packets among actions, decoded.
func sentMessages(_ packets: [OutgoingPacket]) -> [DNSMessage] {
    packets.compactMap { try? DNSMessage(decoding: $0.bytes) }
}

extension Array where Element == MDNSResponderAction {
    var packets: [OutgoingPacket] { compactMap { if case let .send(packet) = $0 { packet } else { nil } } }
    var events: [MDNSResponderEvent] { compactMap { if case let .event(event) = $0 { event } else { nil } } }
}

extension Array where Element == MDNSBrowserAction {
    var packets: [OutgoingPacket] { compactMap { if case let .send(packet) = $0 { packet } else { nil } } }
    var events: [MDNSBrowserEvent] { compactMap { if case let .event(event) = $0 { event } else { nil } } }
}

/// A responder with a seeded jitter source, `node-1` on ifA (10.0.0.1) unless told otherwise.
func makeResponder(host: String = "node-1", seed: UInt64 = 1) throws -> MDNSResponder {
    try MDNSResponder(configuration: MDNSResponderConfiguration(hostName: host), jitter: JitterSource(SeededRandom(seed: seed)))
}

func bigpeerService(_ instance: String = "Ship Node", port: UInt16 = 4040) throws -> MDNSService {
    MDNSService(instanceName: instance, serviceType: bigpeerType, port: port, txt: try TXTRecord([("v", "1"), ("role", "node")]))
}

/// Runs the responder's timers up to `end`; returns what it did, stamped with the time.
func run(_ responder: inout MDNSResponder, until end: Int64) -> [(at: Int64, action: MDNSResponderAction)] {
    var done: [(at: Int64, action: MDNSResponderAction)] = []
    while let next = responder.nextWakeup, next <= end {
        done += responder.tick(now: next).map { (next, $0) }
    }
    return done
}

func run(_ browser: inout MDNSBrowser, until end: Int64) -> [(at: Int64, action: MDNSBrowserAction)] {
    var done: [(at: Int64, action: MDNSBrowserAction)] = []
    while let next = browser.nextWakeup, next <= end {
        done += browser.tick(now: next).map { (next, $0) }
    }
    return done
}

/// A responder for `node-1` with one service, probed and announced on ifA (10.0.0.1, fe80::1):
/// the clock stands at 5000.
func establishedResponder(addresses: [IPAddress] = [v4(10, 0, 0, 1), IPAddress(bytes: [0xFE, 0x80] + [UInt8](repeating: 0, count: 13) + [1])!])
    throws -> (MDNSResponder, MDNSServiceID) {
    var responder = try makeResponder()
    let id = try responder.register(try bigpeerService(), now: 0)
    _ = responder.setInterface(ifA, addresses: addresses, now: 0)
    _ = run(&responder, until: 5000)
    return (responder, id)
}

func query(_ questions: [DNSQuestion], known: [DNSResourceRecord] = [], id: UInt16 = 0) -> DNSMessage {
    DNSMessage(header: .query(id: id), questions: questions, answers: known)
}

func makeBrowser(seed: UInt64 = 7, cacheLimit: Int = 10_000) -> MDNSBrowser {
    var configuration = MDNSBrowserConfiguration(serviceType: bigpeerType)
    configuration.cacheLimit = cacheLimit
    return MDNSBrowser(configuration: configuration, jitter: JitterSource(SeededRandom(seed: seed)))
}

func response(_ answers: [DNSResourceRecord], additionals: [DNSResourceRecord] = []) -> DNSMessage {
    DNSMessage(header: .response(), answers: answers, additionals: additionals)
}
