// A tiny in-memory link for the Discovery tests: every node's multicast reaches every node (its
// sender too, as multicast loopback does), unicast reaches the node with that address, and a
// seeded fraction of deliveries is lost. Zero latency; time advances to the earliest wake-up.
@testable import Discovery
import TestRandomness

struct SimulatedNode {
    var address: IPAddress
    var responder: MDNSResponder?
    var browser: MDNSBrowser?
    var responderEvents: [(at: Int64, event: MDNSResponderEvent)] = []
    var browserEvents: [(at: Int64, event: MDNSBrowserEvent)] = []
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

    /// Adds a node on ifA with its address; its responder and browser start now.
    mutating func add(_ node: SimulatedNode) -> Int {
        let index = nodes.count
        nodes.append(node)
        if var responder = node.responder {
            let actions = responder.setInterface(ifA, addresses: [node.address], now: now)
            nodes[index].responder = responder
            take(actions, from: index)
        }
        nodes[index].browser?.addInterface(ifA, now: now)
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
            let source = Endpoint(address: nodes[from].address, port: mdnsPort)
            for index in nodes.indices {
                switch packet.destination {
                case .multicast: break
                case let .unicast(endpoint): guard endpoint.address == nodes[index].address else { continue }
                }
                if random.chance(lossPercent) {
                    dropped += 1
                    continue
                }
                delivered += 1
                let received = ReceivedPacket(bytes: packet.bytes, interface: ifA, source: source, viaMulticast: packet.destination == .multicast)
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
