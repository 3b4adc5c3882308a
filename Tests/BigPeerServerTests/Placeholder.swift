import Testing
@testable import BigPeerServer
