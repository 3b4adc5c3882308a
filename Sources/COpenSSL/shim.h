#include <openssl/ssl.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <openssl/pem.h>

// Macros Swift cannot import.
static inline long bp_SSL_set_tlsext_host_name(SSL *s, const char *name) { return SSL_set_tlsext_host_name(s, name); }
static inline long bp_SSL_CTX_set_min_proto_version(SSL_CTX *c, int v) { return SSL_CTX_set_min_proto_version(c, v); }
static inline long bp_SSL_CTX_set_mode(SSL_CTX *c, long m) { return SSL_CTX_set_mode(c, m); }
static inline long bp_SSL_CTX_set_options(SSL_CTX *c, long o) { return SSL_CTX_set_options(c, o); }
static inline void bp_SSL_CTX_disable_renegotiation(SSL_CTX *c) { SSL_CTX_set_options(c, SSL_OP_NO_RENEGOTIATION); }

// ALPN selection for servers: picks "http/1.1" from the client's list, or none (no ALPN is not fatal).
static int bp_alpn_select_http11(SSL *ssl, const unsigned char **out, unsigned char *outlen,
                                 const unsigned char *in, unsigned int inlen, void *arg) {
    static const unsigned char ours[] = { 8, 'h', 't', 't', 'p', '/', '1', '.', '1' };
    (void)ssl; (void)arg;
    if (SSL_select_next_proto((unsigned char **)out, outlen, ours, sizeof(ours), in, inlen) == OPENSSL_NPN_NEGOTIATED)
        return SSL_TLSEXT_ERR_OK;
    return SSL_TLSEXT_ERR_NOACK;
}
static inline void bp_SSL_CTX_set_alpn_http11(SSL_CTX *c) { SSL_CTX_set_alpn_select_cb(c, bp_alpn_select_http11, NULL); }
