// Seeded fuzzing of the decoder: random values round-trip; mutated and truncated messages either
// decode to something that re-encodes and decodes to itself, or fail with a DBusError.
@testable import DBus
import TestRandomness
import Testing

@Suite("D-Bus fuzz")
struct DBusFuzzTests {
    static func randomType(_ random: inout SeededRandom, depth: Int = 0) -> DBusType {
        let basic: [DBusType] = [.byte, .boolean, .int16, .uint16, .int32, .uint32, .int64, .uint64, .double, .string, .objectPath, .signature]
        guard depth < 4, random.chance(40) else { return basic[random.below(basic.count)] }
        switch random.below(4) {
        case 0: return .array(randomType(&random, depth: depth + 1))
        case 1: return .array(.dictEntry(basic[random.below(basic.count)], randomType(&random, depth: depth + 1)))
        case 2: return .structure((0...random.below(3)).map { _ in randomType(&random, depth: depth + 1) })
        default: return .variant
        }
    }

    static func randomValue(_ type: DBusType, _ random: inout SeededRandom, depth: Int = 0) -> DBusValue {
        switch type {
        case .byte: .byte(UInt8(truncatingIfNeeded: random.next()))
        case .boolean: .boolean(random.chance(50))
        case .int16: .int16(Int16(truncatingIfNeeded: random.next()))
        case .uint16: .uint16(UInt16(truncatingIfNeeded: random.next()))
        case .int32: .int32(Int32(truncatingIfNeeded: random.next()))
        case .uint32: .uint32(UInt32(truncatingIfNeeded: random.next()))
        case .int64: .int64(Int64(bitPattern: random.next()))
        case .uint64: .uint64(random.next())
        case .unixFD: .unixFD(0)
        case .double: .double(Double(Int32(truncatingIfNeeded: random.next())) / 8)
        case .string: .string(["", "a", "héllo", "org.bluez", String(repeating: "x", count: random.below(40))][random.below(5)])
        case .objectPath: .objectPath(["/", "/org/bluez/hci0", "/a_1/b"][random.below(3)])
        case .signature: .signature(["", "a{sv}", "(yy)"][random.below(3)])
        case .variant:
            .variant(randomValue(depth < 3 ? randomType(&random, depth: depth + 1) : .uint32, &random, depth: depth + 1))
        case .array(let element):
            .array(element, (0..<random.below(4)).map { _ in randomValue(element, &random, depth: depth + 1) })
        case .dictEntry(let k, let v): .dictEntry(randomValue(k, &random, depth: depth + 1), randomValue(v, &random, depth: depth + 1))
        case .structure(let fields): .structure(fields.map { randomValue($0, &random, depth: depth + 1) })
        }
    }

    static func randomMessage(_ random: inout SeededRandom) -> DBusMessage {
        let body = (0..<random.below(4)).map { _ in randomValue(randomType(&random), &random) }
        switch random.below(4) {
        case 0: return .methodCall(destination: random.chance(50) ? "org.bluez" : nil, path: "/org/bluez/hci0", interface: "org.bluez.X", member: "M", body: body)
        case 1: return .signal(path: "/", interface: "org.freedesktop.DBus.ObjectManager", member: "InterfacesAdded", body: body)
        case 2: return DBusMessage(kind: .methodReturn, replySerial: UInt32(1 + random.below(100)), destination: ":1.4", body: body)
        default: return DBusMessage(kind: .error, errorName: "org.bluez.Error.Failed", replySerial: 3, sender: ":1.0", body: body)
        }
    }

    @Test func randomMessages_roundTrip() throws {
        var random = SeededRandom(seed: 0xDB05)
        for _ in 0..<2000 {
            var m = Self.randomMessage(&random)
            m.serial = UInt32(1 + random.below(1000))
            #expect(try DBusMessage.decode(m.encode(serial: m.serial)) == m)
        }
    }

    @Test func mutatedMessages_failCleanlyOrDecodeConsistently() throws {
        var random = SeededRandom(seed: 0xF022)
        var seeds = [Captured.registerAdvertisement, Captured.signal, Captured.serviceUnknown, Captured.hello, Captured.bigEndian]
        for _ in 0..<50 { seeds.append(try Self.randomMessage(&random).encode(serial: 5)) }
        var decoded = 0
        for round in 0..<20_000 {
            var bytes = seeds[round % seeds.count]
            for _ in 0..<(1 + random.below(4)) {
                switch random.below(5) {
                case 0 where !bytes.isEmpty: bytes[random.below(bytes.count)] = UInt8(truncatingIfNeeded: random.next())
                case 1 where !bytes.isEmpty: bytes[random.below(bytes.count)] ^= UInt8(1 << random.below(8))
                case 2 where !bytes.isEmpty: bytes.removeSubrange(random.below(bytes.count)...)
                case 3: bytes.insert(UInt8(truncatingIfNeeded: random.next()), at: random.below(bytes.count + 1))
                default: if bytes.count > 16 { bytes[4 + random.below(12)] = UInt8(truncatingIfNeeded: random.next()) }
                }
            }
            do {
                let m = try DBusMessage.decode(bytes)
                decoded += 1
                // Compared as bytes: a mutated double may be a NaN, which is not equal to itself.
                let once = try m.encode(serial: m.serial)
                #expect(try DBusMessage.decode(once).encode(serial: m.serial) == once)
            } catch {
                // Any DBusError is a clean refusal (the typed throw guarantees nothing else escapes).
            }
        }
        #expect(decoded > 0)
    }

    @Test func everyTruncation_isRefused() {
        for seed in [Captured.registerAdvertisement, Captured.signal, Captured.bigEndian] {
            for n in 0..<seed.count {
                #expect(throws: DBusError.self) { try DBusMessage.decode(Array(seed.prefix(n))) }
            }
        }
    }
}
