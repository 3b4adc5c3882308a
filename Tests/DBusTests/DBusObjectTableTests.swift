@testable import DBus
import Testing

@Suite("D-Bus exported objects")
struct DBusObjectTableTests {
    func table() throws -> DBusObjectTable {
        var t = DBusObjectTable()
        try t.exportObjectManager(at: "/app")
        try t.export(path: "/app/s0", interfaces: [DBusInterface(name: "x.Service", properties: ["UUID": .string("u"), "Primary": .boolean(true)])])
        try t.export(path: "/app/s0/c0", interfaces: [DBusInterface(name: "x.Char", properties: ["Flags": .array(.string, [.string("read")])],
                                                                    methods: ["Read": { _ in .success([.bytes([1, 2])]) }])])
        try t.export(path: "/other", interfaces: [DBusInterface(name: "x.Other")])
        return t
    }

    func call(_ path: String, _ interface: String?, _ member: String, _ body: [DBusValue] = []) -> DBusMessage {
        var m = DBusMessage.methodCall(destination: nil, path: path, interface: interface, member: member, body: body)
        m.serial = 11
        m.sender = ":1.5"
        return m
    }

    @Test func getAllAndGet_returnTheProperties() throws {
        let t = try table()
        let all = try #require(t.handle(call("/app/s0", DBusStandardInterface.properties, "GetAll", [.string("x.Service")])))
        #expect(all.body == [.properties(["UUID": .string("u"), "Primary": .boolean(true)])])
        let one = try #require(t.handle(call("/app/s0", DBusStandardInterface.properties, "Get", [.string("x.Service"), .string("UUID")])))
        #expect(one.body == [.variant(.string("u"))] && one.replySerial == 11 && one.destination == ":1.5")
        let missing = try #require(t.handle(call("/app/s0", DBusStandardInterface.properties, "Get", [.string("x.Service"), .string("Nope")])))
        #expect(missing.errorName == "org.freedesktop.DBus.Error.UnknownProperty")
        let set = try #require(t.handle(call("/app/s0", DBusStandardInterface.properties, "Set", [.string("x.Service"), .string("UUID"), .variant(.string("v"))])))
        #expect(set.kind == .error)
    }

    @Test func getManagedObjects_listsEverythingBelowTheRootOnly() throws {
        let reply = try #require(try table().handle(call("/app", DBusStandardInterface.objectManager, "GetManagedObjects")))
        let objects = try #require(reply.body.first?.dictionaryEntries)
        #expect(objects.map(\.key) == [.objectPath("/app/s0"), .objectPath("/app/s0/c0")])
        #expect(reply.signature == "a{oa{sa{sv}}}")
        let notManager = try #require(try table().handle(call("/other", DBusStandardInterface.objectManager, "GetManagedObjects")))
        #expect(notManager.kind == .error)
    }

    @Test func methods_introspectionAndUnknowns() throws {
        let t = try table()
        #expect(t.handle(call("/app/s0/c0", "x.Char", "Read"))?.body == [.bytes([1, 2])])
        #expect(t.handle(call("/app/s0/c0", nil, "Read"))?.body == [.bytes([1, 2])])
        #expect(t.handle(call("/app/s0/c0", "x.Char", "Write"))?.errorName == "org.freedesktop.DBus.Error.UnknownMethod")
        #expect(t.handle(call("/nowhere", "x.Char", "Read"))?.errorName == "org.freedesktop.DBus.Error.UnknownObject")
        let xml = try #require(t.handle(call("/app", DBusStandardInterface.introspectable, "Introspect"))?.body.first?.stringValue)
        #expect(xml.contains("<node name=\"s0\"/>"))
        var noReply = call("/app/s0/c0", "x.Char", "Read")
        noReply.flags = .noReplyExpected
        #expect(t.handle(noReply) == nil)
    }

    @Test func unexportingARoot_removesItsObjects() throws {
        var t = try table()
        t.unexport(path: "/app")
        #expect(t.objects.keys.sorted() == ["/other"])
    }
}
