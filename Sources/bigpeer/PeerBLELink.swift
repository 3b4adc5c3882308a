import BLEDiscovery
import Glibc
import Logging
import SmallPeer
import Sockets
import Synchronization

/// What `PeerCommand` drives after connecting: one `SyncClient`, or the BLE link that replaces
/// its client when it moves to another node.
protocol PeerSyncClient: Sendable {
    var status: SyncClient.Status { get }
    func waitUntilCaughtUp(timeout: Duration) async throws(SyncClient.ClientError)
    func updateCredentials(jwt: String)
    func stop() async
}

extension SyncClient: PeerSyncClient {}

/// `bigpeer peer --ble` without `--url` (docs/LOCAL-NODE.md, "BLE peer links"): scans through
/// BlueZ (`BLENodeFinder`) for BigPeer nodes, optionally only those advertising `--ble-name`,
/// and syncs with one over `l2cap://ADDRESS/PSM` (`BLENodeChooser` decides which). When that node
/// is lost from the scan and its link is down, the link moves to another node found.
///
/// **Threading.** The D-Bus connection runs on a loop of its own; its finder events, and a tick
/// every second for the link's state (a `SyncClient` reports it only as `status`), go in order
/// through one task (`drive`), the only one that dials and hangs up. `current` is shared under a mutex.
final class PeerBLELink: PeerSyncClient {
    private enum Input { case event(BLEFinderEvent), tick }

    enum StartError: Error, CustomStringConvertible {
        case unavailable(BLEUnavailable)
        case noNode(String)

        var description: String {
            switch self {
            case .unavailable(let e): "\(e)"
            case .noNode(let why): why
            }
        }
    }

    private let peer: SmallPeer
    private let group: EventLoopGroup
    private let connection: DBusConnection
    private let logger: Logger
    /// The client of the node dialled now, and the configuration each new one starts from (its
    /// credentials follow `updateCredentials`).
    private let current: Mutex<(client: SyncClient?, configuration: SyncClient.Configuration)>
    private let inputs: AsyncStream<Input>.Continuation
    private let tasks: Mutex<[Task<Void, Never>]> = Mutex([])
    private let finder: Mutex<BLENodeFinder?> = Mutex(nil)
    /// Set by `stop`, so closing the bus connection ourselves is not reported.
    private let stopping = Mutex(false)

    private init(peer: SmallPeer, group: EventLoopGroup, connection: DBusConnection, configuration: SyncClient.Configuration,
                 inputs: AsyncStream<Input>.Continuation, logger: Logger) {
        self.peer = peer
        self.group = group
        self.connection = connection
        self.current = Mutex((nil, configuration))
        self.inputs = inputs
        self.logger = logger
    }

    /// Scans on `adapter` and waits, at most `timeout`, until a node is found and dialled.
    static func start(peer: SmallPeer, client: SyncClient.Configuration, adapter: String, name: String?, timeout: Duration,
                      logger: Logger) async throws(StartError) -> PeerBLELink {
        let group: EventLoopGroup
        do { group = try EventLoopGroup(threads: 1) } catch { throw .unavailable(BLEUnavailable("\(error)")) }
        let environment = getenv("DBUS_SYSTEM_BUS_ADDRESS").map { ["DBUS_SYSTEM_BUS_ADDRESS": String(cString: $0)] } ?? [:]
        let connection: DBusConnection
        do { connection = try await DBusConnection.systemBus(environment: environment, loop: group.next(), logger: logger) } catch {
            group.shutdown()
            throw .unavailable(error)
        }
        let (stream, inputs) = AsyncStream.makeStream(of: Input.self)
        let link = PeerBLELink(peer: peer, group: group, connection: connection, configuration: client, inputs: inputs, logger: logger)
        let driver = Task { await link.drive(stream, chooser: BLENodeChooser(name: name)) }
        let ticks = Task {
            while !Task.isCancelled {
                try? await Task.sleep(for: .seconds(1))
                inputs.yield(.tick)
            }
        }
        link.tasks.withLock { $0 = [driver, ticks] }
        await connection.onClose { [weak link] reason in
            guard let link, !link.stopping.withLock({ $0 }) else { return }
            logger.warning("BLE scanning ended: the D-Bus connection closed (\(reason)); staying with the node dialled")
        }
        do {
            let finder = try await BLENodeFinder.start(connection: connection, adapter: adapter) { inputs.yield(.event($0)) }
            link.finder.withLock { $0 = finder }
        } catch {
            await link.stop()
            throw .unavailable(error)
        }
        let deadline = ContinuousClock.now + timeout
        while link.current.withLock({ $0.client == nil }) {
            guard ContinuousClock.now < deadline else {
                await link.stop()
                throw .noNode("no BigPeer node\(name.map { " named \"\($0)\"" } ?? "") found on \(adapter) in \(timeout)")
            }
            try? await Task.sleep(for: .milliseconds(50))
        }
        return link
    }

    /// The only place links are dialled and hung up, one input at a time.
    private func drive(_ inputs: AsyncStream<Input>, chooser: BLENodeChooser) async {
        var chooser = chooser
        for await input in inputs {
            let client = current.withLock { $0.client }
            let linkUp = client?.status.phase == .connected
            let action: BLENodeChooser.Action?
            switch input {
            case .event(let event): action = chooser.handle(event, linkUp: linkUp)
            case .tick: action = linkUp ? nil : chooser.linkDown()
            }
            guard let action else { continue }
            current.withLock { $0.client = nil }
            await client?.stop()
            guard case .dial(let node, let url) = action else {
                logger.notice("BLE: no BigPeer node in range; scanning")
                continue
            }
            let configuration = current.withLock { state in
                state.configuration.url = url
                return state.configuration
            }
            do {
                let dialled = try SyncClient(peer: peer, configuration: configuration)
                current.withLock { $0.client = dialled }
                logger.notice("BLE: syncing with a node", metadata: ["name": "\(node.name ?? "-")", "url": "\(url)"])
            } catch {
                logger.error("BLE: cannot dial a node", metadata: ["url": "\(url)", "error": "\(error)"])
            }
        }
    }

    var status: SyncClient.Status { current.withLock { $0.client?.status } ?? SyncClient.Status() }

    /// Waits on the node dialled now (`--sync-once`: the first one found).
    func waitUntilCaughtUp(timeout: Duration) async throws(SyncClient.ClientError) {
        guard let client = current.withLock({ $0.client }) else { throw .failed("no BigPeer node in range") }
        try await client.waitUntilCaughtUp(timeout: timeout)
    }

    func updateCredentials(jwt: String) {
        let client = current.withLock { state in
            state.configuration.jwt = jwt
            return state.client
        }
        client?.updateCredentials(jwt: jwt)
    }

    /// Stops scanning and the link, and closes the bus connection.
    func stop() async {
        stopping.withLock { $0 = true }
        for task in tasks.withLock({ $0 }) { task.cancel() }
        inputs.finish()
        for task in tasks.withLock({ $0 }) { await task.value }
        if let finder = finder.withLock({ $0 }) { await finder.stop() }
        let client = current.withLock { state in
            defer { state.client = nil }
            return state.client
        }
        await client?.stop()
        await connection.close()
        group.shutdown()
    }
}
