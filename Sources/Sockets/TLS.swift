import COpenSSL
import Glibc

/// A TLS failure, with OpenSSL's reason text (never sent to peers; for logs).
public struct TLSError: Error, CustomStringConvertible, Sendable {
    public let operation: String
    public let reason: String
    public var description: String { "TLS \(operation) failed: \(reason)" }

    /// Drains OpenSSL's per-thread error queue into one message.
    static func fromQueue(_ operation: String) -> TLSError {
        var reasons: [String] = []
        while true {
            let code = ERR_get_error()
            if code == 0 { break }
            var buf = [CChar](repeating: 0, count: 256)
            ERR_error_string_n(code, &buf, buf.count)
            reasons.append(String(decoding: buf.prefix { $0 != 0 }.map { UInt8(bitPattern: $0) }, as: UTF8.self))
        }
        return TLSError(operation: operation, reason: reasons.isEmpty ? "unknown" : reasons.joined(separator: "; "))
    }
}

/// An OpenSSL `SSL_CTX`: TLS 1.2 or newer, configured once, then shared by every loop.
///
/// `@unchecked Sendable`: OpenSSL documents `SSL_CTX` as safe to use from many threads to create
/// `SSL` objects once configuration is done; this class offers no mutation after `init`.
public final class TLSContext: @unchecked Sendable {
    let ctx: OpaquePointer
    public let isServer: Bool

    /// A server context from PEM files: the certificate chain and its private key. Offers ALPN
    /// `http/1.1`.
    public init(serverCertificatePath: String, privateKeyPath: String) throws(TLSError) {
        guard let ctx = SSL_CTX_new(TLS_server_method()) else { throw TLSError.fromQueue("SSL_CTX_new") }
        self.ctx = ctx
        isServer = true
        try Self.common(ctx)
        guard SSL_CTX_use_certificate_chain_file(ctx, serverCertificatePath) == 1 else {
            throw TLSError.fromQueue("loading certificate \(serverCertificatePath)")
        }
        guard SSL_CTX_use_PrivateKey_file(ctx, privateKeyPath, SSL_FILETYPE_PEM) == 1 else {
            throw TLSError.fromQueue("loading private key \(privateKeyPath)")
        }
        guard SSL_CTX_check_private_key(ctx) == 1 else { throw TLSError.fromQueue("key does not match certificate") }
        bp_SSL_CTX_set_alpn_http11(ctx)
    }

    /// A client context that verifies the peer's chain against the system CA store (plus
    /// `additionalCAFile`, if given) and, per connection, the host name (`SSL_set1_host`).
    public init(clientWithAdditionalCAFile additionalCAFile: String? = nil) throws(TLSError) {
        guard let ctx = SSL_CTX_new(TLS_client_method()) else { throw TLSError.fromQueue("SSL_CTX_new") }
        self.ctx = ctx
        isServer = false
        try Self.common(ctx)
        guard SSL_CTX_set_default_verify_paths(ctx) == 1 else { throw TLSError.fromQueue("loading system CA store") }
        if let file = additionalCAFile, SSL_CTX_load_verify_locations(ctx, file, nil) != 1 {
            throw TLSError.fromQueue("loading CA file \(file)")
        }
        SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, nil)
        let alpn: [UInt8] = [8] + Array("http/1.1".utf8)
        _ = SSL_CTX_set_alpn_protos(ctx, alpn, UInt32(alpn.count))
    }

    private static func common(_ ctx: OpaquePointer) throws(TLSError) {
        // OpenSSL writes to the socket with write(2), which raises SIGPIPE when the peer is gone;
        // plain connections use MSG_NOSIGNAL, but TLS ones cannot, so the signal is ignored
        // process-wide once TLS is in use (EPIPE is handled as an error instead).
        signal(SIGPIPE, SIG_IGN)
        guard bp_SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION) == 1 else { throw TLSError.fromQueue("min version") }
        // Partial writes + moving buffer: our output queue may hand SSL_write a different base
        // address when it retries after WANT_WRITE.
        _ = bp_SSL_CTX_set_mode(ctx, Int(SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER | SSL_MODE_RELEASE_BUFFERS))
        bp_SSL_CTX_disable_renegotiation(ctx)
    }

    deinit { SSL_CTX_free(ctx) }
}

/// One TLS session over a non-blocking socket (`SSL_set_fd`). Loop-owned, like its connection.
final class TLSSession {
    let ssl: OpaquePointer
    private(set) var handshakeDone = false

    enum Step { case done, wantRead, wantWrite, closed, failed(TLSError) }

    init(context: TLSContext, fd: Int32, serverName: String?) throws(TLSError) {
        guard let ssl = SSL_new(context.ctx) else { throw TLSError.fromQueue("SSL_new") }
        self.ssl = ssl
        SSL_set_fd(ssl, fd)
        if context.isServer {
            SSL_set_accept_state(ssl)
        } else {
            SSL_set_connect_state(ssl)
            if let name = serverName {
                _ = bp_SSL_set_tlsext_host_name(ssl, name)
                guard SSL_set1_host(ssl, name) == 1 else { throw TLSError.fromQueue("SSL_set1_host") }
            }
        }
    }

    deinit { SSL_free(ssl) }

    private func classify(_ rc: Int32, _ op: String) -> Step {
        switch SSL_get_error(ssl, rc) {
        case SSL_ERROR_WANT_READ: return .wantRead
        case SSL_ERROR_WANT_WRITE: return .wantWrite
        case SSL_ERROR_ZERO_RETURN: return .closed
        case SSL_ERROR_SYSCALL:
            let e = bp_errno_tls()
            if ERR_peek_error() == 0 && (e == 0 || e == ECONNRESET || e == EPIPE) { return .closed }
            return .failed(TLSError.fromQueue("\(op) (errno \(e))"))
        default:
            return .failed(TLSError.fromQueue(op))
        }
    }

    func handshake() -> Step {
        ERR_clear_error()
        let rc = SSL_do_handshake(ssl)
        if rc == 1 { handshakeDone = true; return .done }
        return classify(rc, "handshake")
    }

    /// Reads decrypted bytes. `.done` never comes back from here; a positive count does.
    func read(into buf: UnsafeMutableRawBufferPointer) -> (Int, Step) {
        ERR_clear_error()
        let n = SSL_read(ssl, buf.baseAddress, Int32(min(buf.count, Int(Int32.max))))
        if n > 0 { return (Int(n), .done) }
        return (0, classify(n, "read"))
    }

    func write(_ bytes: UnsafeRawBufferPointer) -> (Int, Step) {
        ERR_clear_error()
        guard bytes.count > 0 else { return (0, .done) }
        let n = SSL_write(ssl, bytes.baseAddress, Int32(min(bytes.count, Int(Int32.max))))
        if n > 0 { return (Int(n), .done) }
        return (0, classify(n, "write"))
    }

    var hasBufferedPlaintext: Bool { SSL_pending(ssl) > 0 }

    /// The ALPN protocol both sides agreed on, if any.
    var negotiatedProtocol: String? {
        var p: UnsafePointer<UInt8>?
        var len: UInt32 = 0
        SSL_get0_alpn_selected(ssl, &p, &len)
        guard let p, len > 0 else { return nil }
        return String(decoding: UnsafeBufferPointer(start: p, count: Int(len)), as: UTF8.self)
    }

    /// Sends close_notify (best effort; the socket is about to close).
    func shutdown() {
        ERR_clear_error()
        _ = SSL_shutdown(ssl)
        ERR_clear_error()
    }
}

@inline(__always) private func bp_errno_tls() -> Int32 { Glibc.errno }
