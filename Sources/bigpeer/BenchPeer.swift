import CRDT
import Sockets
import SyncPeer
import SyncProtocol
import Synchronization

/// A lightweight raw-protocol peer for `bigpeer bench sync`: handshake, one subscription, credit
/// granted back for every data message, and counters. Every message is decoded and checked in
/// full (`SyncMessageDecoder`: canonical CBOR, every entry's collection, id and state copied out);
/// with `decodeStates` each `docs` state is also decoded as a CRDT document (`Document.decode`,
/// what a small peer does before merging) and its `_id` compared with the entry's. It keeps no
/// documents (benchmarks measure the server and the wire, not a client store).
///
/// It connects through a `SyncLink`, so over WebSocket or a LAN TCP link alike (`--sync-url`).
///
/// **Threading.** The link and this delegate live on one event loop; counters are atomics read
/// by the benchmark's task; `onData` runs on the loop.
final class BenchPeer: SyncLinkDelegate, @unchecked Sendable {
    // @unchecked: the mutable stored properties (`link`) are touched only on `loop` (delegate
    // callbacks and the `loop.execute` blocks below); everything read elsewhere is an Atomic.
    let loop: EventLoop
    let site: UInt64
    let credentials: SyncCredentials
    let subscription: Subscribe?
    var link: SyncLink?
    let welcomed = Atomic<Bool>(false)
    let synced = Atomic<Bool>(false)
    let closedCode = Atomic<Int>(-1)
    let documents = Atomic<Int>(0)
    let dataBytes = Atomic<Int>(0)
    /// Decode every received state as a CRDT document (and count those that fail or mismatch).
    let decodeStates: Bool
    let invalidStates = Atomic<Int>(0)
    /// Called on the loop for every `changes` message with its size (fan-out latency, bytes on the wire).
    let onChanges: (@Sendable (Int, [ChangeEntry]) -> Void)?

    init(loop: EventLoop, site: UInt64, credentials: SyncCredentials, subscription: Subscribe?,
         onChanges: (@Sendable (Int, [ChangeEntry]) -> Void)? = nil, decodeStates: Bool = false) {
        self.decodeStates = decodeStates
        self.loop = loop
        self.site = site
        self.credentials = credentials
        self.subscription = subscription
        self.onChanges = onChanges
    }

    /// Connects once (no reconnecting: a benchmark peer that loses its link reports it).
    func connect(_ url: String) {
        loop.execute { [self] in
            var configuration = SyncLink.Configuration(url: url, maxConnectAttempts: 1)
            configuration.maxMessageSize = 32 << 20
            do throws(SyncLink.LinkError) {
                let link = try SyncLink(configuration: configuration, loop: loop)
                link.delegate = self
                self.link = link
                link.connectNow()
            } catch {
                closedCode.store(0, ordering: .relaxed)
            }
        }
    }

    func send(_ m: SyncMessage) { link?.send(m.encode()) }

    func close() { loop.execute { [self] in link?.stop() } }

    func syncLinkConnected(_ link: SyncLink) {
        send(.hello(Hello(site: site, peerKey: Array("bench".utf8), deviceName: "bench-\(site)", credentials: credentials,
                          credit: 8 << 20, maxMessageSize: 16 << 20)))
    }

    func syncLink(_ link: SyncLink, received bytes: [UInt8]) {
        guard let m = try? SyncMessageDecoder.decode(bytes) else { return }
        switch m {
        case .welcome:
            welcomed.store(true, ordering: .relaxed)
            if let subscription { send(.subscribe(subscription)) }
        case .documents(_, let entries):
            documents.add(entries.count, ordering: .relaxed)
            if decodeStates {
                var invalid = 0
                for e in entries {
                    guard case .state(let bytes) = e.payload, let doc = try? Document.decode(bytes), doc.id == e.document.id else {
                        invalid += 1
                        continue
                    }
                }
                if invalid > 0 { invalidStates.add(invalid, ordering: .relaxed) }
            }
            dataBytes.add(bytes.count, ordering: .relaxed)
            send(.credit(bytes: UInt64(bytes.count)))
        case .changes(_, let entries):
            dataBytes.add(bytes.count, ordering: .relaxed)
            onChanges?(bytes.count, entries)
            send(.credit(bytes: UInt64(bytes.count)))
        case .synced:
            synced.store(true, ordering: .relaxed)
        case .ping(let n):
            send(.pong(n))
        default:
            break
        }
    }

    func syncLinkDown(_ link: SyncLink, reason: String, wasOpen: Bool) {
        // The close code, when the reason carries one ("closed (1000: ...)"); 0 for a failed attempt.
        let code = wasOpen ? Int(reason.drop { !$0.isNumber }.prefix { $0.isNumber }) ?? 1006 : 0
        closedCode.store(code, ordering: .relaxed)
        link.stop()
        self.link = nil
    }
}
