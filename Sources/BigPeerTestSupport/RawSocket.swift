import Glibc
import SyncProtocol
import WebSocket

/// A sync peer on a plain socket, for what `SyncTestClient` cannot do: stop reading (its WebSocket
/// adapter always reads), so the server's queue for it fills. Frames go in and out by hand.
public enum RawSocket {
    public struct Failure: Error { public var what: String }

    /// A peer that says hello (granting 1 GiB of credit), subscribes to `queries` (ids 1, 2, …),
    /// and from then on reads only what the test reads, through a 4 KiB receive buffer: its
    /// descriptor, for the caller to close.
    public static func stuckSyncPeer(port: Int, site: UInt64 = 99, maxMessageSize: UInt64, subscribingTo queries: [String]) async throws -> Int32 {
        let fd = try connect(port: port, receiveBuffer: 4096)
        do {
            try await upgrade(fd, port: port)
            let hello = Hello(site: site, peerKey: [1], deviceName: "stuck", credentials: nil, credit: 1 << 30, maxMessageSize: maxMessageSize)
            try await sendFrame(fd, SyncMessage.hello(hello).encode())
            for (i, query) in queries.enumerated() {
                try await sendFrame(fd, SyncMessage.subscribe(Subscribe(id: UInt32(i + 1), query: query)).encode())
            }
            return fd
        } catch {
            close(fd)
            throw error
        }
    }

    public static func connect(port: Int, receiveBuffer: Int32) throws -> Int32 {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { throw Failure(what: "socket") }
        var size = receiveBuffer
        setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &size, socklen_t(MemoryLayout<Int32>.size))
        var addr = sockaddr_in()
        addr.sin_family = sa_family_t(AF_INET)
        addr.sin_port = in_port_t(UInt16(port).bigEndian)
        addr.sin_addr.s_addr = inet_addr("127.0.0.1")
        let r = withUnsafePointer(to: &addr) { $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) } }
        guard r == 0 else { close(fd); throw Failure(what: "connect errno \(errno)") }
        return fd
    }

    /// Sends the upgrade request and reads exactly the response head, a byte at a time so no
    /// frame byte is consumed with it (every wait bounded, none holding a cooperative thread).
    public static func upgrade(_ fd: Int32, port: Int) async throws {
        let request = "GET /api/v4/sync HTTP/1.1\r\nHost: 127.0.0.1:\(port)\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: bigpeer-sync.v1\r\n\r\n"
        try await write(fd, Array(request.utf8))
        var head: [UInt8] = []
        while !head.ends(with: [13, 10, 13, 10]) {
            switch try await DescriptorWait.receive(fd, upTo: 1, timeout: .seconds(5)) {
            case .data(let byte): head += byte
            case .closed: throw Failure(what: "closed during upgrade")
            case .timedOut: throw Failure(what: "no upgrade response")
            }
        }
        guard String(decoding: head, as: UTF8.self).hasPrefix("HTTP/1.1 101") else { throw Failure(what: String(decoding: head, as: UTF8.self)) }
    }

    /// Reads one unfragmented, unmasked server frame (what this server sends) and returns its payload.
    public static func readFrame(_ fd: Int32) async throws -> [UInt8] { try await readFrameWithOpcode(fd).payload }

    /// The same with the frame's opcode (a Ping may come between data frames); each read waits
    /// up to `timeout`.
    public static func readFrameWithOpcode(_ fd: Int32, timeout: Duration = .seconds(5)) async throws -> (opcode: UInt8, payload: [UInt8]) {
        func read(_ n: Int) async throws -> [UInt8] {
            var out: [UInt8] = []
            while out.count < n {
                switch try await DescriptorWait.receive(fd, upTo: n - out.count, timeout: timeout) {
                case .data(let bytes): out += bytes
                case .closed: throw Failure(what: "closed")
                case .timedOut: throw Failure(what: "no frame")
                }
            }
            return out
        }
        let h = try await read(2)
        var length = Int(h[1] & 0x7F)
        if length == 126 { length = try await read(2).reduce(0) { $0 << 8 | Int($1) } }
        if length == 127 { length = try await read(8).reduce(0) { $0 << 8 | Int($1) } }
        return (h[0] & 0x0F, try await read(length))
    }

    /// The header of a masked binary frame (FIN set) declaring `length` payload bytes, for a test
    /// that sends the payload (or part of it) by hand. The mask key is 1, 2, 3, 4.
    public static func binaryFrameHeader(length: Int) -> [UInt8] {
        [0x82, 0xFF] + (0..<8).map { UInt8(truncatingIfNeeded: length >> (8 * (7 - $0))) } + [1, 2, 3, 4]
    }

    /// The payload of the server's Close frame (its code first), skipping the frames before it.
    public static func closePayload(_ fd: Int32, timeout: Duration = .seconds(30)) async throws -> [UInt8] {
        while true {
            let frame = try await readFrameWithOpcode(fd, timeout: timeout)
            if frame.opcode == 8 { return frame.payload }
        }
    }

    public static func sendFrame(_ fd: Int32, _ payload: [UInt8]) async throws {
        var frame: [UInt8] = []
        WebSocketFrameWriter.append(fin: true, opcode: .binary, maskKey: WebSocketMaskKey(1, 2, 3, 4), payload: payload, to: &frame)
        try await write(fd, frame)
    }

    /// Everything the peer sends until it closes (each wait bounded by `timeout`).
    public static func readUntilEOF(_ fd: Int32, timeout: Duration = .seconds(5)) async throws -> [UInt8] {
        var out: [UInt8] = []
        while true {
            switch try await DescriptorWait.receive(fd, upTo: 64 << 10, timeout: timeout) {
            case .data(let bytes): out += bytes
            case .closed: return out
            case .timedOut: throw Failure(what: "no EOF within \(timeout) (\(out.count) bytes so far)")
            }
        }
    }

    public static func write(_ fd: Int32, _ bytes: [UInt8]) async throws {
        guard try await DescriptorWait.sendAll(fd, bytes, stallTimeout: .seconds(5)) else { throw Failure(what: "send failed or stalled") }
    }
}

extension Array where Element == UInt8 {
    public func ends(with suffix: [UInt8]) -> Bool { count >= suffix.count && Array(self[(count - suffix.count)...]) == suffix }
}
