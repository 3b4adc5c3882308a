// A local node's replication with its upstream BigPeer (docs/LOCAL-NODE.md): to the upstream this
// node is one more sync peer (PROTOCOL.md), speaking the protocol through the same sans-I/O
// `SyncClientSession` and reconnecting `SyncLink` as SmallPeer, with this server's store behind it.
//
//   upstream ──docs/changes──▶ download queue ─▶ mergeDeltas(origin: upstream, checkpoints) ─▶ credit, want
//   change log ──head──▶ backlog read (origin ≠ upstream) ─▶ up ─▶ ack ─▶ upload position saved
//
// Everything of one replicator runs on its own event-loop thread (`UpstreamCore`); the store's
// async calls run as tasks whose results come back to that loop. This class is the thread-safe
// face: start, stop, status, the relayed subscriptions.

import Logging
import Postgres
import Sockets
import Store
import Synchronization
import SyncPeer

public final class UpstreamReplicator: Sendable {
    public enum StartError: Error, Sendable, CustomStringConvertible {
        case invalid(String)
        public var description: String {
            switch self { case .invalid(let why): why }
        }
    }

    public let configuration: UpstreamConfiguration
    let group: EventLoopGroup
    let core: LoopBound<UpstreamCore>
    let statusBox: StatusBox
    let lease: UpstreamLease?

    /// Starts replicating `store` with the upstream (connects in the background). Fails on a
    /// configuration that cannot work: a bad URL, a subscription that is not a plain SELECT.
    /// With `lockSession` (the database's connection settings), it replicates only while this
    /// instance holds the database's replication lock for this upstream (`UpstreamLease`: one
    /// instance of several on a database replicates); without, at once.
    public init(store: DocumentStore, configuration: UpstreamConfiguration, lockSession: PostgresConfiguration?,
                logger: Logger) throws(StartError) {
        if configuration.displayURL != configuration.url {
            // Said without the URL: it holds a secret, and this message is printed and logged.
            throw .invalid("--upstream: credentials in the URL are not supported (\(configuration.displayURL)); use --upstream-key or --upstream-jwt-file")
        }
        let subscriptions = try Self.parseSubscriptions(configuration.subscriptions)
        let (link, group): (SyncLink, EventLoopGroup)
        do {
            (link, group) = try SyncLink.onOwnLoop(SyncLink.Configuration(url: configuration.url, reconnectBase: configuration.reconnectBase,
                                                                          reconnectMax: configuration.reconnectMax, additionalCAFile: configuration.additionalCAFile))
        } catch {
            throw .invalid("--upstream: \(error)")
        }
        let loop = link.loop
        let statusBox = StatusBox(UpstreamStatus(url: configuration.displayURL))
        self.configuration = configuration
        self.group = group
        self.statusBox = statusBox
        let core = UpstreamCore(store: store, configuration: configuration, subscriptions: subscriptions, link: link,
                                status: statusBox, logger: logger)
        link.delegate = core
        self.core = LoopBound(core, loop: loop)
        let bound = self.core
        lease = lockSession.map { UpstreamLease(configuration: $0, upstream: configuration.rowKey, loop: loop, timing: UpstreamLease.Timing(probeInterval: configuration.leaseProbeInterval, retryInterval: configuration.leaseRetryInterval), logger: logger) }
        loop.execute { bound.value.start(leading: lockSession == nil) }
        lease?.start { held, why in bound.loop.execute { bound.value.lead(held, why: why) } }
    }

    /// The subscriptions `queries` name, or why one cannot be one (not a plain SELECT).
    public static func parseSubscriptions(_ queries: [String]) throws(StartError) -> [SyncSubscription] {
        do { return try queries.map { q throws(UpstreamError) in try UpstreamSubscriptions.parse(q) } } catch {
            throw .invalid(error.description)
        }
    }

    public var status: UpstreamStatus { statusBox.value }

    /// The union of the local peers' subscriptions (with `relaySubscriptions`): kept current by
    /// the server as sessions subscribe, unsubscribe and go.
    public func relay(_ subscriptions: Set<SyncSubscription>) {
        let bound = core
        bound.loop.execute { bound.value.relay(subscriptions) }
    }

    /// Says `bye`, lets merges in progress commit (at most `grace`), and stops the loop.
    public func stop(grace: Duration = .seconds(5)) async {
        await lease?.stop()
        let bound = core
        bound.loop.execute { bound.value.stop() }
        let deadline = ContinuousClock.now + grace
        while ContinuousClock.now < deadline {
            let idle = await withCheckedContinuation { (c: CheckedContinuation<Bool, Never>) in
                bound.loop.execute { c.resume(returning: bound.value.isIdle) }
            }
            if idle { break }
            try? await Task.sleep(for: .milliseconds(10))
        }
        group.shutdown()
    }
}

/// The status, shared by the core (which writes it on its loop) and the replicator (which reads
/// it from any thread).
final class StatusBox: Sendable {
    private let mutex: Mutex<UpstreamStatus>
    init(_ status: UpstreamStatus) { mutex = Mutex(status) }
    var value: UpstreamStatus { mutex.withLock { $0 } }
    func update(_ body: (inout UpstreamStatus) -> Void) { mutex.withLock { body(&$0) } }
}
