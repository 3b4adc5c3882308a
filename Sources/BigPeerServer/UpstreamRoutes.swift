// `GET /api/v4/upstream`: how a local node's replication with its upstream stands
// (docs/LOCAL-NODE.md, "Status"), and its links with the other nodes found on the LAN
// (`lanLinks`). It needs a key that may read every collection (what it shows is server-wide: the
// upstream, what waits to go up). 404 when this server has neither an upstream nor LAN links.

import Auth
import CRDT
import HTTP
import LANDiscovery
import Logging
import Store
import SyncProtocol
import Upstream
import Values

struct UpstreamRoutes {
    let replicator: UpstreamReplicator?
    let mesh: LANMesh?
    let store: DocumentStore
    let auth: Authenticator
    let logger: Logger

    static let path = "/api/v4/upstream"

    func register(on router: inout HTTPRouter) {
        let replicator = self.replicator, mesh = self.mesh, store = self.store, auth = self.auth, logger = self.logger
        router.get(Self.path, .respond { request in
            if let refused = await PresenceRoute.refuseUnlessReadAll(request, auth: auth, logger: logger) { return refused }
            let now = Double(Replica.systemMillis()) / 1000
            guard let replicator else {
                if let mesh { return .json(JSON.serialize(.object(["lanLinks": Self.lanLinks(mesh, now: now)]))) }
                return APIError(.notFound, "this server has no upstream (bigpeer serve --upstream URL) and no LAN links (--lan)")
                    .response(to: request, logger: logger, negotiated: false)
            }
            let status = replicator.status
            // What waits to go up is counted in the database, so it is right even before the
            // first session (or after a restart) and whatever instance asks.
            let backlog: UploadBacklog?
            do {
                backlog = try await store.uploadBacklog(after: status.uploadedThrough, excludingOrigin: status.upstreamSite.map { Int64(bitPattern: $0) })
            } catch {
                backlog = nil
            }
            var body = Self.body(status, backlog: backlog, now: now)
            // Rows of URLs no longer configured: each holds the change log and tombstones back.
            if case .object(var fields) = body, let others = try? await store.otherUpstreams(than: status.url) {
                fields["otherUpstreams"] = .array(others.map {
                    .object(["url": .string($0.upstream), "uploadedThrough": .object(["txn": .int($0.uploaded.txn), "seq": .int(Int64($0.uploaded.seq))])])
                })
                body = .object(fields)
            }
            if case .object(var fields) = body, let mesh {
                fields["lanLinks"] = Self.lanLinks(mesh, now: now)
                body = .object(fields)
            }
            return .json(JSON.serialize(body))
        })
    }

    /// The nodes of the sync group found on the LAN: the ones this node dials with their
    /// replication (the fields of an upstream's status), the ones that dial it as `accepting`.
    static func lanLinks(_ mesh: LANMesh, now: Double) -> Value {
        .array(mesh.links.partners.map { partner in
            let n = partner.neighbour, replication = partner.link?.status
            return .object([
                "peerKey": .string(n.peerKey),
                "deviceName": .string(n.name),
                "url": .string(n.url),
                "dials": .bool(n.dials),
                // Stopped advertising (goodbye or expiry): the link ends after --lan-link-grace.
                "advertised": .bool(n.vanishedAt == nil),
                "state": .string(replication?.state.rawValue ?? (n.dials ? "connecting" : "accepting")),
                "replication": replication.map { body($0, backlog: nil, now: now) } ?? .null,
            ])
        })
    }

    static func body(_ s: UpstreamStatus, backlog: UploadBacklog?, now: Double) -> Value {
        func time(_ t: Double?) -> Value { t.map { .double($0) } ?? .null }
        var pending: Value = .null
        if let backlog {
            pending = .object([
                "changes": .int(Int64(min(backlog.changes, DocumentStore.backlogCountLimit))),
                // More than the count says (it stops at a million).
                "more": .bool(backlog.changes > DocumentStore.backlogCountLimit),
                "oldestAgeSeconds": backlog.oldestAt.map { .double(max(0, now - $0)) } ?? .null,
            ])
        }
        return .object([
            "state": .string(s.state.rawValue),
            "url": .string(s.url),
            // A 64-bit id as text: JSON numbers above 2^53 lose digits in most parsers.
            "upstreamSite": s.upstreamSite.map { .string(String($0)) } ?? .null,
            "session": s.session.map(Value.string) ?? .null,
            "sessions": .int(Int64(s.sessions)),
            "lastError": s.lastError.map(Value.string) ?? .null,
            "standbyReason": s.standbyReason.map(Value.string) ?? .null,
            "lastErrorAt": time(s.lastErrorAt),
            "lastExchangeAt": time(s.lastExchangeAt),
            "lastCheckpointAt": time(s.lastCheckpointAt),
            "downloadCheckpoint": s.downloadCheckpoint.map { .int($0) } ?? .null,
            // How long received changes wait to be merged here (0: none waiting); null without a session.
            "downloadLagSeconds": s.state == .connected ? .double(s.downloadWaitingSince.map { max(0, now - $0) } ?? 0) : .null,
            "pendingUploads": pending,
            "uploadedThrough": .object(["txn": .int(s.uploadedThrough.txn), "seq": .int(Int64(s.uploadedThrough.seq))]),
            "subscriptions": .array(s.subscriptions.keys.sorted().map { key in
                let parts = key.split(separator: "\u{0}", maxSplits: 1, omittingEmptySubsequences: false)
                var sub: [String: Value] = ["query": .string(String(parts.first ?? "")), "synced": .bool(s.subscriptions[key] ?? false)]
                if parts.count > 1, let args = try? JSON.parse(Array(parts[1].utf8)) { sub["args"] = args }
                return .object(sub)
            }),
            "subscriptionErrors": .object(s.subscriptionErrors.mapValues(Value.string)),
            "uploadedChanges": .int(Int64(s.uploadedChanges)),
            "downloadedEntries": .int(Int64(s.downloadedEntries)),
            "rejectedUploads": .int(Int64(s.rejectedUploads)),
            "documentPassUploads": .int(Int64(s.documentPassUploads)),
            "skippedUploads": .int(Int64(s.skippedUploads)),
            "credentialRefreshes": .int(Int64(s.credentialRefreshes)),
            "resentAsFullState": .int(Int64(s.resentAsFullState)),
            "knownListed": .int(Int64(s.knownListed)),
            "uploadedBytes": .int(Int64(s.uploadedBytes)),
            "downloadedBytes": .int(Int64(s.downloadedBytes)),
            "lastRejection": s.lastRejection.map(Value.string) ?? .null,
        ])
    }
}
