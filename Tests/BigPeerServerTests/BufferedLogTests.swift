@testable import BigPeerServer
import Foundation
import Glibc
import Logging
import Testing

/// The access-log handler writes off the caller's thread, loses nothing while under its bound,
/// keeps each writer's lines in order, and formats lines like swift-log's stream handler.
@Suite struct BufferedLogTests {
    @Test func linesFromConcurrentWritersAllArrive_inOrderPerWriter() async throws {
        let path = NSTemporaryDirectory() + "bigpeer-log-\(getpid())-\(UInt32.random(in: 0...UInt32.max)).log"
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o600)
        #expect(fd >= 0)
        defer { close(fd); unlink(path) }
        let sink = LogSink(fd: fd)
        try await withThrowingTaskGroup(of: Void.self) { group in
            for writer in 0..<4 {
                group.addTask {
                    var logger = Logger(label: "test") { label in BufferedStderrLogHandler(label: label, sink: sink) }
                    logger[metadataKey: "writer"] = "\(writer)"
                    for n in 0..<500 { logger.info("request", metadata: ["n": "\(n)", "path": "/a b"]) }
                    logger.debug("below the level: never written")
                }
            }
            try await group.waitForAll()
        }
        sink.flush()
        let text = try String(contentsOfFile: path, encoding: .utf8)
        let lines = text.split(separator: "\n")
        #expect(lines.count == 2000)
        var next = [Int](repeating: 0, count: 4)
        for line in lines {
            // 2026-11-22T11:34:25+0000 info test : n=7 path=/a b writer=2 [BigPeerServerTests] request
            #expect(line.contains(" info test : n="))
            #expect(line.hasSuffix("] request"))
            guard let w = line.range(of: "writer="), let n = line.range(of: " n=") else { continue }
            let writer = Int(line[w.upperBound...].prefix { $0.isNumber }) ?? -1
            let number = Int(line[n.upperBound...].prefix { $0.isNumber }) ?? -1
            guard (0..<4).contains(writer) else { Issue.record("bad writer in \(line)"); continue }
            #expect(number == next[writer])
            next[writer] = number + 1
        }
        #expect(next == [500, 500, 500, 500])
    }
}
