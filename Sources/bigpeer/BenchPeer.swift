import CRDT
import Sockets
import SyncProtocol
import Synchronization
import WebSocket

/// A lightweight raw-protocol peer for `bigpeer bench sync`: handshake, one subscription, credit
/// granted back for every data message, and counters. Every message is decoded and checked in
/// full (`SyncMessageDecoder`: canonical CBOR, every entry's collection, id and state copied out);
/// with `decodeStates` each `docs` state is also decoded as a CRDT document (`Document.decode`,
/// what a small peer does before merging) and its `_id` compared with the entry's. It keeps no
/// documents (benchmarks measure the server and the wire, not a client store).
///
/// **Threading.** The adapter and this handler live on one event loop; counters are atomics read
/// by the benchmark's task; `onData` runs on the loop.
final class BenchPeer: WebSocketClientHandler, @unchecked Sendable {
    // @unchecked: the mutable stored properties (`adapter`) are touched only on `loop` (handler
    // callbacks and the `loop.execute` blocks below); everything read elsewhere is an Atomic.
    let loop: EventLoop
    let site: UInt64
    let credentials: SyncCredentials
    let subscription: Subscribe?
    var adapter: WebSocketClientAdapter?
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

    func connect(url: WebSocketURL, address: SocketAddress) {
        loop.execute { [self] in
            do throws(WebSocketClientError) {
                adapter = try WebSocketClientAdapter.connect(
                    url: url, address: address, loop: loop,
                    handshake: WebSocketClientHandshake(subprotocols: [SyncProtocol.webSocketSubprotocol], deflate: nil),
                    configuration: WebSocketConfiguration(maxFrameSize: 32 << 20, maxMessageSize: 32 << 20, pingInterval: nil,
                                                          maxQueuedBytes: 64 << 20),
                    handshakeTimeout: .seconds(30), handler: self)
            } catch {
                closedCode.store(0, ordering: .relaxed)
            }
        }
    }

    func send(_ m: SyncMessage) { try? adapter?.send(.binary(m.encode())) }

    func close() { loop.execute { [self] in adapter?.close(.normalClosure, reason: "bench done") } }

    func webSocketDidConnect(_ socket: WebSocketClientAdapter, agreement: WebSocketClientHandshake.Agreement) {
        send(.hello(Hello(site: site, peerKey: Array("bench".utf8), deviceName: "bench-\(site)", credentials: credentials,
                          credit: 8 << 20, maxMessageSize: 16 << 20)))
    }

    func webSocket(_ socket: WebSocketClientAdapter, didReceive message: WebSocketMessage) {
        guard case .binary(let bytes) = message, let m = try? SyncMessageDecoder.decode(bytes) else { return }
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

    func webSocketDidClose(_ socket: WebSocketClientAdapter, code: WebSocketCloseCode, reason: String) {
        closedCode.store(Int(code.rawValue), ordering: .relaxed)
        adapter = nil
    }

    func webSocket(_ socket: WebSocketClientAdapter, didFailToConnect error: WebSocketClientError) {
        closedCode.store(0, ordering: .relaxed)
        adapter = nil
    }
}
