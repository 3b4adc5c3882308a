// BigPeerTestSupport: shared test helpers (PostgreSQL harness, free ports, manual clocks).
