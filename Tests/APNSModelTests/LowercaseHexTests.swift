import APNSModel
import Foundation
import SeededRandom
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

@Suite struct UUIDTextTests {
    @Test func parsesWhatFoundationParsesInEitherCase() {
        var random = SeededGenerator(seed: 11)
        for _ in 0..<200 {
            var bytes = [UInt8](repeating: 0, count: 16)
            for i in bytes.indices { bytes[i] = UInt8(truncatingIfNeeded: random.next()) }
            let uuid = bytes.withUnsafeBytes { UUID(uuid: $0.load(as: uuid_t.self)) }
            #expect(LowercaseHex.uuid(uuid.uuidString) == uuid)
            #expect(LowercaseHex.uuid(uuid.uuidString.lowercased()) == uuid)
        }
    }

    /// Stricter than Foundation's `sscanf`, which skips leading blanks and reads a "0x" inside a
    /// digit pair: Apple's `apns-id` is canonical, and anything else names no notification.
    @Test func refusesAnythingButTheCanonicalForm() {
        let good = "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0"
        var cases = [
            "", "0f1e2d3c4b5a69788796a5b4c3d2e1f0", good + "0", String(good.dropLast()), "{" + good.dropFirst(),
            good.replacingOccurrences(of: "-", with: "_"), good.replacingOccurrences(of: "f", with: "g"),
            "0f1e2d3c-4b5a-6978-8796a-5b4c3d2e1f0", " 0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f", "0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1fé",
        ]
        // Every single byte of the good text replaced by a character that is neither hex nor the dash.
        for i in 0..<36 {
            var chars = Array(good)
            chars[i] = "x"
            cases.append(String(chars))
        }
        for text in cases {
            #expect(LowercaseHex.uuid(text) == nil, "\(text)")
        }
        #expect(LowercaseHex.uuid(good) == UUID(uuidString: good))
    }
}
