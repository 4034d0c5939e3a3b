import Foundation
import Testing

@_spi(APNSWorker) @testable import APNSJSON

/// The payload skimmer (JSONSkim.swift) against the full reader it stands in for: for every body,
/// the same verdict (the same error at the same byte with the same words) and, for a good body,
/// the same facts about the payload as read off the built `JSONValue`.
@Suite struct JSONSkimTests {
    /// What the reader says of a body when it builds the payload (no member skimmed): its error,
    /// or the facts the job parser asks about, read off the built value.
    static func reference(_ body: [UInt8]) -> Result<JSONPayloadSummary, JSONSyntaxError> {
        let object: JSONTopLevelObject
        do throws(JSONSyntaxError) {
            object = try body.withUnsafeBufferPointer { buffer throws(JSONSyntaxError) in
                if let bad = JSONReader.firstInvalidUTF8Offset(buffer) {
                    throw JSONSyntaxError(offset: bad, message: "not valid UTF-8")
                }
                return try JSONReader.parseTopLevelObject(buffer, maxDepth: 64)
            }
        } catch {
            return .failure(error)
        }
        var summary = JSONPayloadSummary()
        guard let payload = object["payload"]?.value else { return .success(summary) }
        summary.kind = kind(payload)
        if case .object(let members) = payload, let aps = members["aps"] {
            summary.aps = kind(aps)
            if case .object(let apsMembers) = aps {
                summary.apsHasAlert = apsMembers["alert"] != nil
                summary.apsHasSound = apsMembers["sound"] != nil
                summary.apsHasBadge = apsMembers["badge"] != nil
                summary.contentAvailableIsOne = apsMembers["content-available"] == .integer(1)
            }
        }
        return .success(summary)
    }

    static func kind(_ value: JSONValue) -> JSONKind {
        switch value {
        case .null: .null
        case .bool: .bool
        case .integer(let i): .integer(i)
        case .number: .number
        case .string: .string
        case .array: .array
        case .object: .object
        }
    }

    static func skimmed(_ body: [UInt8]) -> Result<JSONPayloadSummary, JSONSyntaxError> {
        body.withUnsafeBufferPointer { buffer in
            if let bad = JSONReader.firstInvalidUTF8Offset(buffer) {
                return .failure(JSONSyntaxError(offset: bad, message: "not valid UTF-8"))
            }
            do throws(JSONSyntaxError) {
                let object = try JSONReader.parseTopLevelObject(buffer, maxDepth: 64, skimming: "payload")
                return .success(object.skimmed?.summary ?? JSONPayloadSummary())
            } catch {
                return .failure(error)
            }
        }
    }

    static func expectSame(_ body: [UInt8], sourceLocation: SourceLocation = #_sourceLocation) {
        let text = String(decoding: body, as: UTF8.self)
        switch (reference(body), skimmed(body)) {
        case (.failure(let expected), .failure(let got)):
            #expect(got == expected, "\(text)", sourceLocation: sourceLocation)
        case (.success(let expected), .success(let got)):
            #expect(got.kind == expected.kind && got.aps == expected.aps, "\(text)", sourceLocation: sourceLocation)
            #expect(got.apsHasAlert == expected.apsHasAlert && got.apsHasSound == expected.apsHasSound, "\(text)", sourceLocation: sourceLocation)
            #expect(got.apsHasBadge == expected.apsHasBadge, "\(text)", sourceLocation: sourceLocation)
            #expect(got.contentAvailableIsOne == expected.contentAvailableIsOne, "\(text)", sourceLocation: sourceLocation)
        case (let expected, let got):
            Issue.record("\(text): the full reader says \(expected), the skimmer \(got)", sourceLocation: sourceLocation)
        }
    }

    static let payloads: [String] = [
        #"{"aps":{"alert":"hi"}}"#,
        #"{"aps":{"content-available":1}}"#,
        #"{"aps":{"content-available":1.0}}"#,
        #"{"aps":{"content-available":true}}"#,
        #"{"aps":{"content-available":"1"}}"#,
        #"{"aps":{"content-available":1,"alert":null}}"#,
        #"{"aps":{"content-available":1,"sound":"x","badge":2}}"#,
        #"{"aps":[]}"#, #"{"aps":null}"#, #"{"aps":"x"}"#, #"{}"#, "[]", "null", "3", "-0.5e3", #""s""#,
        #"{"\u0061ps":{"\u0061lert":"escaped keys name the same members"}}"#,
        #"{"aps":{},"\u0061ps":{}}"#,
        #"{"aps":{"alert":{"title":"t","title":"again"}}}"#,
        #"{"caf\u00e9":1,"café":2}"#,
        "{\"cafe\u{301}\":1,\"caf\u{e9}\":2}",
        #"{"aps":{"content-available":1},"x":{"aps":{"alert":"nested aps is not aps"}}}"#,
        #"{"a":1,"a":[1,2,}"#,
        #"{"aps":{"alert":"\ud800"}}"#, #"{"aps":{"alert":"\x"}}"#, "{\"aps\":{\"alert\":\"tab\u{9}inside\"}}",
        #"{"aps":{"badge":99999999999999999999999}}"#, #"{"aps":{"badge":1e999}}"#, #"{"aps":{"badge":01}}"#,
        #"{"aps":{"alert":"unterminated}}"#, #"{"aps":{"alert":tru}}"#, #"{"aps" {}}"#, #"{"aps":{}"#,
        "{" + (0..<40).map { #""k\#($0)":\#($0)"# }.joined(separator: ",") + "}",
        "{" + (0..<40).map { #""k\#($0 % 30)":\#($0)"# }.joined(separator: ",") + "}",
        "{" + (0..<20).map { #""k\#($0)":\#($0)"# }.joined(separator: ",") + #","k\u0031":1}"#,
        String(repeating: "[", count: 70) + String(repeating: "]", count: 70),
        #"{"aps":"# + String(repeating: "{\"a\":", count: 70) + "1" + String(repeating: "}", count: 70) + "}",
    ]

    @Test func sameVerdictAsTheFullReader() {
        for payload in Self.payloads {
            Self.expectSame(Array(#"{"token":"ab","payload":\#(payload),"priority":10}"#.utf8))
        }
        Self.expectSame(Array(#"{"payload":{"aps":{}},"payload":{"aps":{}}}"#.utf8))
        Self.expectSame(Array(#"{"payload":{"aps":{}},"payload":[1,}"#.utf8))
    }

    /// Bodies made by cutting, doubling and changing bytes of the cases above (a fixed seed, so a
    /// failure repeats): whatever the damage, both readers agree.
    @Test func sameVerdictOnDamagedBodies() {
        var random = SplitMix64(seed: 0x5EED_2026)
        let alphabet = Array(#"{}[]":,\ u0aps1e-."#.utf8) + [0x09, 0xC3, 0xA9]
        for payload in Self.payloads {
            let body = Array(#"{"payload":\#(payload)}"#.utf8)
            for _ in 0..<200 {
                var damaged = body
                for _ in 0...(random.next() % 3) {
                    let at = Int(random.next() % UInt64(damaged.count))
                    switch random.next() % 3 {
                    case 0: damaged.remove(at: at)
                    case 1: damaged.insert(alphabet[Int(random.next() % UInt64(alphabet.count))], at: at)
                    default: damaged[at] = alphabet[Int(random.next() % UInt64(alphabet.count))]
                    }
                    if damaged.isEmpty { damaged = [0x7B] }
                }
                Self.expectSame(damaged)
            }
        }
    }
}

/// A small seeded generator, so a randomized test repeats exactly.
struct SplitMix64: RandomNumberGenerator {
    var state: UInt64
    init(seed: UInt64) { state = seed }
    mutating func next() -> UInt64 {
        state &+= 0x9E37_79B9_7F4A_7C15
        var z = state
        z = (z ^ (z >> 30)) &* 0xBF58_476D_1CE4_E5B9
        z = (z ^ (z >> 27)) &* 0x94D0_49BB_1331_11EB
        return z ^ (z >> 31)
    }
}
