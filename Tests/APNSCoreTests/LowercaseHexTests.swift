import APNSCore
import Foundation
import Testing

@Suite struct LowercaseHexTests {
    @Test func bytesBecomeTwoLowerCaseDigitsEach() {
        #expect(LowercaseHex.string([UInt8]()) == "")
        #expect(LowercaseHex.string([0x00, 0x0f, 0xa0, 0xff]) == "000fa0ff")
        let token = DeviceToken(hex: "0123456789ABCDEF0123456789abcdef0123456789abcdef0123456789ABCDEF")!
        #expect(token.hex == "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef")
    }

    @Test func aPrefixComesFirstInTheSameString() {
        let token = DeviceToken(hex: "00FF10ab")!
        #expect(LowercaseHex.string(token.bytes, after: "/3/device/") == "/3/device/00ff10ab")
        #expect(LowercaseHex.string([UInt8](), after: "/3/device/") == "/3/device/")
        #expect(LowercaseHex.string([0xab], after: "") == "ab")
    }

    @Test func uuidsMatchFoundationsCanonicalFormInLowerCase() {
        var random = SeededGenerator(seed: 7)
        for _ in 0..<200 {
            var bytes = [UInt8](repeating: 0, count: 16)
            for i in bytes.indices { bytes[i] = UInt8(truncatingIfNeeded: random.next()) }
            let uuid = bytes.withUnsafeBytes { UUID(uuid: $0.load(as: uuid_t.self)) }
            #expect(LowercaseHex.string(uuid) == uuid.uuidString.lowercased())
        }
    }
}
