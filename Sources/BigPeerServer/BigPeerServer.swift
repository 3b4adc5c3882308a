// BigPeerServer: wiring — configuration, REST handlers, WebSocket endpoint, lifecycle, metrics, logging.
