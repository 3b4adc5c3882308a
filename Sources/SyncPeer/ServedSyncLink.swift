// The socket side of a served LAN TCP sync link, shared by a BigPeer node (`SyncLinkHandler`)
// and a small peer that serves (`ServedStreamLink`).

import Sockets

extension TCPConnection {
    /// Adopts an accepted descriptor of a sync link (closed here if that fails). Must run on
    /// `loop`. The session stops producing at the high-water mark; a peer that stops reading is
    /// dropped past a message (`maxMessageSize`) and 4 MiB more.
    public static func servedSyncLink(fd: Int32, remote: SocketAddress, loop: EventLoop, tls: TLSContext?,
                                      maxMessageSize: Int) throws -> TCPConnection {
        var limits = WriteLimits()
        limits.highWaterMark = 1 << 20
        limits.lowWaterMark = 256 << 10
        limits.dropLimit = maxMessageSize + (4 << 20)
        do {
            return try TCPConnection(acceptedFD: fd, remoteAddress: remote, loop: loop, limits: limits, tls: tls)
        } catch {
            Syscall.close(fd)
            throw error
        }
    }
}
