import CEpoll
import Glibc
import Testing
@testable import Sockets

/// `sockaddr_l2` and the `SOL_BLUETOOTH` options against the kernel's ABI
/// (include/net/bluetooth/bluetooth.h, l2cap.h), byte for byte.
@Suite struct L2CAPTests {
    @Test func sockaddrL2HasTheKernelLayout() {
        #expect(MemoryLayout<bp_sockaddr_l2>.size == 14)
        #expect(MemoryLayout<bp_sockaddr_l2>.offset(of: \.l2_family) == 0)
        #expect(MemoryLayout<bp_sockaddr_l2>.offset(of: \.l2_psm) == 2)
        #expect(MemoryLayout<bp_sockaddr_l2>.offset(of: \.l2_bdaddr) == 4)
        #expect(MemoryLayout<bp_sockaddr_l2>.offset(of: \.l2_cid) == 10)
        #expect(MemoryLayout<bp_sockaddr_l2>.offset(of: \.l2_bdaddr_type) == 12)
        #expect(MemoryLayout<bp_bt_security>.size == 2)
    }

    @Test func addressEncodesAsTheKernelReadsIt() throws {
        let device = try #require(BluetoothAddress("00:11:22:33:Aa:f5"))
        #expect(device.description == "00:11:22:33:AA:F5")
        let address = L2CAPAddress(device: device, type: .leRandom, psm: 0x0081, cid: 0x0040)
        // family 31 (host order, little-endian here), PSM and CID little-endian, the address
        // reversed, type 2 (BDADDR_LE_RANDOM), one byte of padding.
        #expect(address.sockaddrBytes == [31, 0, 0x81, 0x00, 0xF5, 0xAA, 0x33, 0x22, 0x11, 0x00, 0x40, 0x00, 2, 0])
        #expect(L2CAPAddress(device: .any, psm: 0).sockaddrBytes == [31, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0])
        #expect(L2CAPAddress(sockaddrBytes: address.sockaddrBytes) == address)
        // What is handed to bind/connect is those bytes.
        let handed = address.withSockaddr { p, len in Array(UnsafeRawBufferPointer(start: p, count: Int(len))) }
        #expect(handed == address.sockaddrBytes)
        #expect(L2CAPAddress(sockaddrBytes: [2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0]) == nil)  // not AF_BLUETOOTH
        #expect(BluetoothAddress("00:11:22:33:44") == nil)
        #expect(BluetoothAddress("00:11:22:33:44:5G") == nil)
    }

    @Test func optionsHaveTheKernelNumbersAndEncodings() {
        #expect(BluetoothSocketConstants.addressFamily == 31)
        #expect(BluetoothSocketConstants.l2capProtocol == 0)
        #expect(BluetoothSocketConstants.level == 274)
        #expect(BluetoothSocketConstants.security == 4)
        #expect(BluetoothSocketConstants.sendMTU == 12)
        #expect(BluetoothSocketConstants.receiveMTU == 13)
        #expect(BluetoothSecurity(level: .high, keySize: 16).optionBytes == [3, 16])
        #expect(BluetoothSecurity(level: .low).optionBytes == [1, 0])
        #expect(BluetoothSecurity.Level.medium.rawValue == 2 && BluetoothSecurity.Level.fips.rawValue == 4)
    }

    @Test func aMissingBluetoothFamilyIsOneTypedError() async throws {
        let expected = PacketSocketError.bleUnavailable(IOError(call: "socket(AF_BLUETOOTH, SOCK_SEQPACKET, BTPROTO_L2CAP)", errno: EAFNOSUPPORT))
        #expect(expected.description
            == "BLE unavailable: Address family not supported by protocol (socket(AF_BLUETOOTH, SOCK_SEQPACKET, BTPROTO_L2CAP), errno 97)")
        #expect(PacketSockets.classify(IOError(call: "bind", errno: ENODEV)) == .bleUnavailable(IOError(call: "bind", errno: ENODEV)))
        #expect(PacketSockets.classify(IOError(call: "bind", errno: EADDRINUSE)) == .io(IOError(call: "bind", errno: EADDRINUSE)))

        // The real call: here (no AF_BLUETOOTH in the kernel) exactly that error; on a machine with
        // Bluetooth, a listener with a dynamic PSM in the LE range, or "unavailable" without an adapter.
        let group = try EventLoopGroup(threads: 1)
        defer { group.shutdown() }
        let loop = group.next()
        let outcome = try await loop.submit { () -> Result<UInt16?, PacketSocketError> in
            do throws(PacketSocketError) {
                let l = try PacketListener(address: .l2cap(L2CAPAddress(device: .any, psm: 0)), loop: loop) { Syscall.close($0) }
                defer { l.close() }
                return .success(l.psm)
            } catch {
                return .failure(error)
            }
        }
        switch outcome {
        case .success(let psm): #expect(psm.map { (0x80...0xFF).contains($0) } == true)
        case .failure(let error):
            guard case .bleUnavailable(let io) = error else { Issue.record("not 'BLE unavailable': \(error)"); return }
            if io.errno == EAFNOSUPPORT { #expect(error == expected) }
            #expect(error.description.hasPrefix("BLE unavailable: "))
        }
    }
}
