// The worker's own small JSON objects: sorted keys, escapes, and what a JSON parser reads back.
import Foundation
import SeededRandom
import Testing

@testable import APNSJSON

@Suite struct FlatJSONTests {
    @Test func keysInByteOrderWithEveryKindOfValue() {
        let bytes = FlatJSON.object(["token": .string("ab"), "iat": .integer(-42), "jobId": .null, "Z": .integer(0)])
        #expect(String(decoding: bytes, as: UTF8.self) == #"{"Z":0,"iat":-42,"jobId":null,"token":"ab"}"#)
        #expect(FlatJSON.object([:]) == Array("{}".utf8))
    }

    @Test func quotesBackslashesAndControlCharactersAreEscaped() throws {
        let awkward = "a\"b\\c\nd\re\tf\u{01}g\u{1F}h/é😀"
        let bytes = FlatJSON.object([awkward: .string(awkward)])
        let text = String(decoding: bytes, as: UTF8.self)
        #expect(text == #"{"a\"b\\c\nd\re\tf\u0001g\u001fh/é😀":"a\"b\\c\nd\re\tf\u0001g\u001fh/é😀"}"#)
        let parsed = try #require(try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: String])
        #expect(parsed == [awkward: awkward])
    }

    @Test(arguments: 0..<50)
    func randomStringsReadBackUnchanged(seed: Int) throws {
        var random = SeededGenerator(seed: UInt64(seed) + 1)
        let scalars = (0..<Int(random.next() % 40)).map { _ -> Character in
            let pick = random.next() % 4
            let value: UInt32 = pick == 0 ? UInt32(random.next() % 0x20) : pick == 1 ? UInt32(0x20 + random.next() % 0x60) : pick == 2 ? 0x22 : UInt32(0xA0 + random.next() % 0x2000)
            return Character(Unicode.Scalar(value)!)
        }
        let value = String(scalars)
        let bytes = FlatJSON.object(["k": .string(value), "n": .integer(Int64(bitPattern: random.next()))])
        let parsed = try #require(try JSONSerialization.jsonObject(with: Data(bytes)) as? [String: Any])
        #expect(parsed["k"] as? String == value)
    }
}
