import Discovery
import Sockets
import Synchronization

/// The links a BigPeer holds to the partners it finds on the LAN, one per pair: `LANNeighbours`
/// decides, this runs the decisions. Local nodes (`LANMesh`, links are upstream replications) and
/// small peers (`bigpeer peer --lan --listen`, links are sync clients) both use it, so both
/// follow the same rule (`LANLinkRule`) and the same grace.
///
///   browser events (any thread) ─▶ LANNeighbours, under `state` ─actions─▶ `actions` stream
///   one task applies the actions in order: `dial` makes a link, `hangUp` ends one (a redial is
///   both, the old link ended before the new one starts)
///   one task ticks the grace periods every `tickInterval`
///
/// **Threading.** `state` is held only to step the neighbours (and queue their actions, the
/// stream's own lock nested inside) and to take or put a link, never across a handler.
public final class LANLinks<Link: Sendable>: Sendable {
    /// Makes a link to a partner (nil: it could not be made; logged by the handler).
    public typealias Dial = @Sendable (LANNeighbours.Neighbour) async -> Link?
    /// Ends a link.
    public typealias HangUp = @Sendable (Link) async -> Void

    private struct State {
        var neighbours: LANNeighbours
        var links: [String: Link] = [:]
        var stopped = false
    }

    private let state: Mutex<State>
    private let actions: AsyncStream<LANNeighbours.Action>.Continuation
    private let tasks = Mutex<[Task<Void, Never>]>([])
    private let dial: Dial
    private let hangUp: HangUp

    public init(rule: LANLinkRule, grace: Duration, tickInterval: Duration = .milliseconds(250), dial: @escaping Dial, hangUp: @escaping HangUp) {
        state = Mutex(State(neighbours: LANNeighbours(rule: rule, grace: grace)))
        self.dial = dial
        self.hangUp = hangUp
        let (stream, continuation) = AsyncStream.makeStream(of: LANNeighbours.Action.self)
        actions = continuation
        let applying = Task { [weak self] in
            for await action in stream {
                guard let self else { return }
                await apply(action)
            }
        }
        let ticking = Task { [weak self] in
            while !Task.isCancelled {
                guard self?.step({ neighbours, now in neighbours.tick(now: now) }) != nil else { return }  // gone without `stop`
                try? await Task.sleep(for: tickInterval)
            }
        }
        tasks.withLock { $0 = [applying, ticking] }
    }

    /// Browses `_bigpeer._tcp` on `daemon` and links as partners appear.
    public func browse(on daemon: MDNSDaemon) async throws {
        try await daemon.browse(try DNSName(LANAdvertisement.serviceType)) { [weak self] event in self?.receive(event) }
    }

    /// A browser event.
    public func receive(_ event: MDNSBrowserEvent) {
        step { $0.receive(event, now: $1) }
    }

    /// An advertisement seen at `url` (what a browser event carries; tests inject these).
    public func seen(_ advertisement: LANAdvertisement, url: String) {
        step { $0.seen(advertisement, url: url, now: $1) }
    }

    /// An advertisement gone.
    public func lost(name: String) {
        step { $0.lost(name: name, now: $1) }
    }

    /// Every partner known now (dialled or dialling us, advertised or in its grace), by peer key,
    /// with its link on the side that dials.
    public var partners: [(neighbour: LANNeighbours.Neighbour, link: Link?)] {
        state.withLock { s in s.neighbours.neighbours.values.sorted { $0.peerKey < $1.peerKey }.map { (neighbour: $0, link: s.links[$0.peerKey]) } }
    }

    /// The links open now.
    public var links: [Link] { state.withLock { Array($0.links.values) } }

    /// Stops deciding and ends every link.
    public func stop() async {
        state.withLock { $0.stopped = true }
        actions.finish()
        let running = tasks.withLock { $0 }
        for task in running { task.cancel() }
        for task in running { await task.value }
        for link in state.withLock({ s in defer { s.links = [:] }; return Array(s.links.values) }) { await hangUp(link) }
    }

    static func nowMillis() -> Int64 { Int64(NanoTime.now().nanoseconds / 1_000_000) }

    /// Steps the neighbours and queues what they decide, under the lock: decisions of two threads
    /// (a browser event and a tick) then reach the applying task in the order they were made.
    private func step(_ body: (inout LANNeighbours, Int64) -> [LANNeighbours.Action]) {
        let now = Self.nowMillis()
        state.withLock { s in
            guard !s.stopped else { return }
            for action in body(&s.neighbours, now) { actions.yield(action) }
        }
    }

    private func apply(_ action: LANNeighbours.Action) async {
        switch action {
        case .dial(let neighbour):
            await start(neighbour)
        case .redial(let neighbour):
            if let old = state.withLock({ $0.links.removeValue(forKey: neighbour.peerKey) }) { await hangUp(old) }
            await start(neighbour)
        case .hangUp(let peerKey):
            if let old = state.withLock({ $0.links.removeValue(forKey: peerKey) }) { await hangUp(old) }
        }
    }

    private func start(_ neighbour: LANNeighbours.Neighbour) async {
        guard let link = await dial(neighbour) else { return }
        let kept = state.withLock { s in
            guard !s.stopped else { return false }
            s.links[neighbour.peerKey] = link
            return true
        }
        if !kept { await hangUp(link) }
    }
}
