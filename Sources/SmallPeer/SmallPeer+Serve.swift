// A small peer serving other peers (docs/SMALLPEER.md "Serving other peers"): the server side of a
// sync session on one incoming link, the same `SyncConnection` a BigPeer runs, with this peer's
// store behind it (`PeerSyncStorage`). Whoever accepted the link (the CLI's LAN listener, a test's
// in-memory pipe) gives it as a `SyncConnection.Transport` and feeds it what arrives.
//
//   incoming link ──bytes──▶ SyncConnection.receive ─▶ SyncSession ─▶ PeerSyncStorage ─▶ SmallPeer
//                 ◀─send─── (docs, changes, acks)  ◀── head listeners ◀── every logged commit

import CRDT
import Sync
import SyncProtocol
import Synchronization

extension SmallPeer {
    public struct ServeConfiguration: Sendable {
        /// Decides whether a peer may sync and what it may read and write (the session's
        /// `hello`, with its credentials, peer key and device name). Default: `acceptAnyPeer`.
        public var authenticate: @Sendable (Hello) async -> AuthDecision = SmallPeer.acceptAnyPeer
        /// How the link carries the session, for presence (PROTOCOL.md §4.14).
        public var linkType: LinkType = .accessPoint
        /// Heartbeats, page sizes, limits: as a BigPeer's sessions by default. `serverSite` and
        /// `sessionID` are set by `serve`.
        public var session = SyncSession.Configuration(serverSite: 0, sessionID: "")

        public init() {}
    }

    /// Accepts every peer that names itself (a peer key), with read and write access to every
    /// collection. Who may link at all is decided before a link reaches `serve`: the LAN discovery
    /// links only peers of this peer's sync group. Set `ServeConfiguration.authenticate` to check
    /// credentials as well.
    public static let acceptAnyPeer: @Sendable (Hello) async -> AuthDecision = { hello in
        guard !hello.peerKey.isEmpty else { return .refuse(code: .unauthorized, reason: "a peer key is required") }
        return .accept(SyncPermissions(read: .all, write: .all, principal: "peer:" + hello.peerKey.map { ($0 < 16 ? "0" : "") + String($0, radix: 16) }.joined()))
    }

    /// Serves one incoming link as the server side of a sync session over this peer's store, and
    /// returns the started session. The caller hands it every complete message it receives
    /// (`receive`), `transportClosed()` when the link is gone, and `transportDrained()` when
    /// asked; `transport.send` must not block. `executor`: the link's event loop if it has one.
    public func serve(transport: SyncConnection.Transport, configuration: ServeConfiguration = ServeConfiguration(),
                      executor: (any TaskExecutor)? = nil) -> SyncConnection {
        state.withLock { $0.log.keepsRows = true }
        var session = configuration.session
        session.serverSite = siteID.rawValue
        let linkID = PeerPresence.nextLinkID()
        if session.sessionID.isEmpty { session.sessionID = "peer-\(String(siteID.rawValue, radix: 16))-\(linkID)" }
        let served = ServedLink()
        let presence = self.presence, linkType = configuration.linkType
        let port = SyncConnection.PresencePort(
            ready: { hello in
                presence.linkUp(linkID, peerKey: hello.peerKey, type: linkType,
                                peer: DirectPeer(deviceName: hello.deviceName, metadata: hello.metadata), served: true) { records in
                    served.connection.withLock { $0 }?.sendPresence(records)
                }
            },
            received: { records in presence.received(records, from: linkID) },
            ended: {
                presence.linkDown(linkID)
                served.connection.withLock { $0 = nil }
            })
        let connection = SyncConnection(configuration: session, storage: PeerSyncStorage(peer: self), transport: transport,
                                        executor: executor, presence: port, authenticate: configuration.authenticate)
        served.connection.withLock { $0 = connection }
        connection.start()
        return connection
    }
}

/// The session of a served link, for its presence sends; released when the session ends.
private final class ServedLink: Sendable {
    let connection = Mutex<SyncConnection?>(nil)
}
