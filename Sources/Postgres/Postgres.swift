// Postgres: a libpq wrapper with no BigPeer knowledge — connections, pool, typed binds/rows, transactions, LISTEN/NOTIFY, COPY.
