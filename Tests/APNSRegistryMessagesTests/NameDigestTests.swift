/// `NameDigest` (this module's SHA-1 and SHA-256, written out so that it needs no swift-crypto)
/// held to swift-crypto's, and the UUIDv5 built on it held to RFC 9562's own example.
import Crypto
import Foundation
import SeededRandom
import Testing

@testable import APNSRegistryMessages

@Suite struct NameDigestTests {
    @Test func fipsVectors() {
        #expect(Self.hex(NameDigest.sha1(Array("abc".utf8))) == "a9993e364706816aba3e25717850c26c9cd0d89d")
        #expect(Self.hex(NameDigest.sha256(Array("abc".utf8))) == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")
        #expect(Self.hex(NameDigest.sha1([])) == "da39a3ee5e6b4b0d3255bfef95601890afd80709")
        #expect(Self.hex(NameDigest.sha256([])) == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855")
    }

    /// Every length up to 300 bytes: one, two and more blocks, and the padding's edges (55, 56,
    /// 63, 64 bytes, where the length no longer fits the last block).
    @Test func agreesWithSwiftCryptoOnEveryLength() {
        var generator = SeededGenerator(seed: 37)
        for length in 0...300 {
            let bytes = (0..<length).map { _ in UInt8.random(in: 0...255, using: &generator) }
            #expect(NameDigest.sha1(bytes) == Array(Insecure.SHA1.hash(data: bytes)), "SHA-1 of \(length) bytes")
            #expect(NameDigest.sha256(bytes) == Array(SHA256.hash(data: bytes)), "SHA-256 of \(length) bytes")
        }
    }

    /// RFC 9562 Appendix A.4: the UUIDv5 of "www.example.com" in the DNS namespace.
    @Test func uuidv5OfTheRFCExample() throws {
        let dns = try #require(UUID(uuidString: "6ba7b810-9dad-11d1-80b4-00c04fd430c8"))
        #expect(UUIDv5.make(namespace: dns, name: "www.example.com") == UUID(uuidString: "2ed6657d-e927-568b-95e1-2665a8aea6a2"))
    }

    private static func hex(_ bytes: [UInt8]) -> String {
        bytes.map { String(format: "%02x", $0) }.joined()
    }
}
