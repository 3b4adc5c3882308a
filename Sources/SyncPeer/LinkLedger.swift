// What every `MessageLink` keeps the same way, whatever its transport: the consumer's credit and
// the messages held while it is 0, the completions of sends whose bytes have not left yet, and
// the counters. A class, not a struct: it calls out (`received`, completions) and the callee may
// call back into the link (grant credit, send, close) while a call is under way.
//
// Loop-confined, like the link that owns it.

import Sockets

final class LinkLedger {
    var callbacks: LinkCallbacks
    private(set) var counters = LinkCounters()
    private(set) var credit: Int
    /// Messages the transport decoded after credit ran out: at most what one read held, since
    /// the transport stops reading as soon as `received` says so.
    private var held: [[UInt8]] = []
    private var heldHead = 0
    /// Sends waiting for their bytes to leave: the transport's written-byte count at which the
    /// message's last byte is out, in send order.
    private var pending: [(end: UInt64, completion: SendCompletion)] = []
    private var pendingHead = 0
    /// The peer's `bye`, when it sent one (TCP and BLE).
    var peerBye: (code: UInt16, reason: String)?
    /// How the link ended, once it has.
    private(set) var ended: LinkClose?
    /// This side dropped the link without a word (`abort`).
    var aborted = false

    init(callbacks: LinkCallbacks, credit: Int) {
        self.callbacks = callbacks
        self.credit = max(0, credit)
    }

    var receiveCredit: Int { credit }
    var isHolding: Bool { heldHead < held.count }

    // MARK: - Receiving

    /// A message arrived: delivered while there is credit, held otherwise. Returns whether the
    /// transport may go on reading.
    func received(_ message: [UInt8]) -> Bool {
        counters.messagesReceived += 1
        counters.bytesReceived += UInt64(message.count)
        if credit == 0 || isHolding {
            held.append(message)
            return false
        }
        if credit != .max { credit -= 1 }
        callbacks.received(message)
        return credit > 0
    }

    /// More credit: delivers held messages while it lasts. Returns whether the transport may read.
    func grant(_ messages: Int) -> Bool {
        guard messages > 0 else { return credit > 0 && !isHolding }
        credit = credit > .max - messages ? .max : credit + messages
        while credit > 0 && isHolding {
            let message = held[heldHead]
            heldHead += 1
            if credit != .max { credit -= 1 }
            callbacks.received(message)
        }
        if !isHolding && heldHead > 0 {
            held.removeAll(keepingCapacity: false)
            heldHead = 0
        }
        return credit > 0 && !isHolding
    }

    /// A received keepalive (not a message: it costs no credit).
    func keepaliveReceived() { counters.keepalivesReceived += 1 }
    func keepaliveSent() { counters.keepalivesSent += 1 }

    // MARK: - Sending

    /// Takes on the socket of a TCP or BLE link: its write progress completes sends, and it is
    /// not read while there is no credit.
    func attach(_ socket: some LinkSocket) {
        socket.onBytesWritten = { [weak self, unowned socket] in self?.written(socket.bytesWritten) }
        if credit == 0 { socket.pauseReading() }
    }

    /// A message was queued; its last byte leaves when the transport has written `end` bytes.
    /// A write can end the link on the spot (a peer past the drop limit): then it fails at once.
    func sent(_ count: Int, end: UInt64, completion: SendCompletion?) {
        counters.messagesSent += 1
        counters.bytesSent += UInt64(count)
        guard let completion else { return }
        if let ended { return completion(.failure(.closed(ended))) }
        pending.append((end, completion))
    }

    /// The transport has written `total` bytes: completes the sends that are out, in order.
    func written(_ total: UInt64) {
        while pendingHead < pending.count && pending[pendingHead].end <= total {
            let completion = pending[pendingHead].completion
            pendingHead += 1
            completion(.success(()))
        }
        if pendingHead == pending.count && pendingHead > 0 {
            pending.removeAll(keepingCapacity: true)
            pendingHead = 0
        }
    }

    /// The link closed: held messages are dropped, sends still queued fail, then `closed` runs.
    func finish(_ close: LinkClose) {
        var close = close
        if aborted { close = LinkClose(origin: .local, code: nil, reason: "aborted", wasOpen: close.wasOpen, description: "aborted") }
        ended = close
        held = []
        heldHead = 0
        let failed = pending[pendingHead...]
        pending = []
        pendingHead = 0
        for entry in failed { entry.completion(.failure(.closed(close))) }
        callbacks.closed(close)
        callbacks = .none
    }

    func counters(queuedBytes: Int) -> LinkCounters {
        var c = counters
        c.queuedBytes = queuedBytes
        return c
    }
}

/// What the ledger needs of the socket under a TCP or BLE link.
protocol LinkSocket: AnyObject {
    /// Set by the ledger; the socket calls it after each flush that wrote something, and drops
    /// it when it closes.
    var onBytesWritten: (() -> Void)? { get set }
    /// Bytes handed to the kernel (or to TLS) so far.
    var bytesWritten: UInt64 { get }
    func pauseReading()
}

extension TCPConnection: LinkSocket {
    var bytesWritten: UInt64 { totalBytesWritten }
}

extension PacketConnection: LinkSocket {
    var bytesWritten: UInt64 { bytesSent }
}
