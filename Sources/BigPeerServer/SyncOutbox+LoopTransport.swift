import Sockets
import Sync

extension SyncOutbox {
    /// The transport of a session whose link lives on an event loop (a LAN TCP connection, a BLE
    /// channel): messages queue here and leave on the link's loop in the order the session sent
    /// them (`write` frames them and returns the link's queued bytes); a drain request asks the link
    /// (`requestDrain` true: the link reports the drain later, through `takeDrainRequest`).
    func loopTransport<Link: AnyObject>(_ link: LoopBound<Link>, write: @escaping @Sendable (Link, [[UInt8]]) -> Int,
                                        queued: @escaping @Sendable (Link) -> Int, requestDrain: @escaping @Sendable (Link) -> Bool,
                                        close: @escaping @Sendable (UInt16, String) -> Void) -> SyncConnection.Transport {
        let outbox = self
        return SyncConnection.Transport(
            send: { bytes in
                guard outbox.append(bytes) else { return }  // a drain is already scheduled
                link.loop.execute { outbox.noteSocket(queued: write(link.value, outbox.takeAll())) }
            },
            close: close,
            queuedBytes: { outbox.queuedBytes },
            notifyWhenDrained: {
                guard outbox.requestDrain() else { return }  // already asked
                link.loop.execute {
                    outbox.noteSocket(queued: queued(link.value))
                    guard !requestDrain(link.value) else { return }  // the link reports the drain
                    outbox.takeDrainRequest()?.transportDrained()
                }
            })
    }
}
