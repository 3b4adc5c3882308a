// Tiny in-memory links for the Discovery tests: a node's interfaces sit on numbered segments; a
// multicast reaches every interface on the sender's segment (the sender's too, as multicast
// loopback does), a unicast the interface with that address there, and a seeded fraction of
// deliveries is lost. Zero latency; time advances to the earliest wake-up.
@testable import Discovery
import TestRandomness

struct SimulatedNode {
    /// Each interface's segment and address.
    var interfaces: [InterfaceID: (segment: Int, address: IPAddress)]
    var responder: MDNSResponder?
    var browser: MDNSBrowser?
    var responderEvents: [(at: Int64, event: MDNSResponderEvent)] = []
    var browserEvents: [(at: Int64, event: MDNSBrowserEvent)] = []

    /// A node with one interface, ifA on segment 0.
    init(address: IPAddress, responder: MDNSResponder?, browser: MDNSBrowser?) {
        self.init(interfaces: [ifA: (0, address)], responder: responder, browser: browser)
    }

    init(interfaces: [InterfaceID: (segment: Int, address: IPAddress)], responder: MDNSResponder?, browser: MDNSBrowser?) {
        self.interfaces = interfaces
        self.responder = responder
        self.browser = browser
    }
}

struct SimulatedLAN {
    var nodes: [SimulatedNode] = []
    var now: Int64 = 0
    var random: SeededRandom
    var lossPercent: Int
    var delivered = 0
    var dropped = 0
    private var queue: [(from: Int, packet: OutgoingPacket)] = []

    init(seed: UInt64, lossPercent: Int = 0) {
        random = SeededRandom(seed: seed)
        self.lossPercent = lossPercent
    }

    /// Adds a node; its responder and browser start now on all its interfaces.
    mutating func add(_ node: SimulatedNode) -> Int {
        let index = nodes.count
        nodes.append(node)
        for (interface, link) in node.interfaces.sorted(by: { $0.key < $1.key }) {
            if var responder = nodes[index].responder {
                let actions = responder.setInterface(interface, addresses: [link.address], now: now)
                nodes[index].responder = responder
                take(actions, from: index)
            }
            nodes[index].browser?.addInterface(interface, now: now)
        }
        deliverQueued()
        return index
    }

    mutating func take(_ actions: [MDNSResponderAction], from index: Int) {
        for action in actions {
            switch action {
            case let .send(packet): queue.append((index, packet))
            case let .event(event): nodes[index].responderEvents.append((now, event))
            }
        }
    }

    mutating func take(_ actions: [MDNSBrowserAction], from index: Int) {
        for action in actions {
            switch action {
            case let .send(packet): queue.append((index, packet))
            case let .event(event): nodes[index].browserEvents.append((now, event))
            }
        }
    }

    /// Runs until `end` (inclusive), or until `stop` holds after a step.
    mutating func run(until end: Int64, stop: (SimulatedLAN) -> Bool = { _ in false }) {
        while true {
            let wakeups = nodes.flatMap { [$0.responder?.nextWakeup, $0.browser?.nextWakeup].compactMap { $0 } }
            guard let next = wakeups.min(), next <= end else { break }
            now = max(now, next)
            for index in nodes.indices {
                if var responder = nodes[index].responder, let due = responder.nextWakeup, due <= now {
                    let actions = responder.tick(now: now)
                    nodes[index].responder = responder
                    take(actions, from: index)
                }
                if var browser = nodes[index].browser, let due = browser.nextWakeup, due <= now {
                    let actions = browser.tick(now: now)
                    nodes[index].browser = browser
                    take(actions, from: index)
                }
            }
            deliverQueued()
            if stop(self) { return }
        }
        now = max(now, end)
    }

    /// Runs `change` on a node's responder now and delivers what it sends.
    mutating func withResponder(_ index: Int, _ change: (inout MDNSResponder, Int64) -> [MDNSResponderAction]) {
        guard var responder = nodes[index].responder else { return }
        let actions = change(&responder, now)
        nodes[index].responder = responder
        take(actions, from: index)
        deliverQueued()
    }

    private mutating func deliverQueued() {
        var steps = 0
        while !queue.isEmpty, steps < 10_000 {
            steps += 1
            let (from, packet) = queue.removeFirst()
            guard let link = nodes[from].interfaces[packet.interface] else { continue }
            let source = Endpoint(address: link.address, port: mdnsPort)
            // Every interface on the sender's segment, in a fixed order.
            let receivers = nodes.indices.flatMap { index in
                nodes[index].interfaces.filter { $0.value.segment == link.segment }.keys.sorted().map { (index, $0) }
            }
            for (index, interface) in receivers {
                guard let there = nodes[index].interfaces[interface] else { continue }
                switch packet.destination {
                case .multicast: break
                case let .unicast(endpoint): guard endpoint.address == there.address else { continue }
                }
                if random.chance(lossPercent) {
                    dropped += 1
                    continue
                }
                delivered += 1
                let received = ReceivedPacket(bytes: packet.bytes, interface: interface, source: source, viaMulticast: packet.destination == .multicast)
                if var responder = nodes[index].responder {
                    let actions = responder.receive(received, now: now)
                    nodes[index].responder = responder
                    take(actions, from: index)
                }
                if var browser = nodes[index].browser {
                    let actions = browser.receive(received, now: now)
                    nodes[index].browser = browser
                    take(actions, from: index)
                }
            }
        }
    }
}
