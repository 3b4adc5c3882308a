// A local node's upstream link as a link of its presence gossip (PROTOCOL.md §4.14): records
// cross it both ways, so the cloud sees the node's peers and the node sees the cloud's.

import Sockets
import SyncPeer
import SyncProtocol

/// How the replicator reaches the server's presence gossip. `linkUp` gives the upstream's peer
/// key (its site id, 8 bytes big-endian) and a function that sends records to it (any thread).
public struct UpstreamPresence: Sendable {
    public var linkUp: @Sendable (_ peerKey: [UInt8], _ send: @escaping @Sendable ([PresenceRecord]) -> Void) -> Void
    public var received: @Sendable ([PresenceRecord]) -> Void
    public var linkDown: @Sendable () -> Void

    public init(linkUp: @escaping @Sendable (_ peerKey: [UInt8], _ send: @escaping @Sendable ([PresenceRecord]) -> Void) -> Void,
                received: @escaping @Sendable ([PresenceRecord]) -> Void, linkDown: @escaping @Sendable () -> Void) {
        self.linkUp = linkUp
        self.received = received
        self.linkDown = linkDown
    }
}

extension UpstreamReplicator {
    /// Makes the upstream link a presence link from its next (or current) session on.
    public func attachPresence(_ presence: UpstreamPresence) {
        let bound = core
        bound.loop.execute { bound.value.presence = presence }
    }
}

extension UpstreamCore {
    func presenceLinkUp(_ welcome: Welcome) {
        guard let presence else { return }
        presenceLinked = true
        let bound = LoopBound(self, loop: loop)
        presence.linkUp(Self.peerKey(welcome.site)) { records in
            bound.loop.execute {
                let core = bound.value
                guard var s = core.session else { return }
                let actions = s.presence(records)
                core.session = s
                core.perform(actions)
            }
        }
    }

    func presenceLinkDown() {
        guard presenceLinked else { return }
        presenceLinked = false
        presence?.linkDown()
    }
}
