import APNSJSON
import APNSModel
import APNSRegistryMessages
import Foundation
import Testing

@testable import APNSRegistry

/// Contract §4 and §6's shape rules for what reaches PostgreSQL: a registration's `bundleId`,
/// `token` and `group`, a group job's `group`, and the 64 KiB body limit. Pure, no sockets.
@Suite struct RegistrationValidationTests {
    static func register(bundle: String = "com.example.app", token: String = "abcd", group: String = "acct") -> [UInt8] {
        var out = Array(#"{"op":"register","bundleId":"#.utf8)
        JSONValue.string(bundle).append(to: &out)
        out += Array(#","token":"#.utf8)
        JSONValue.string(token).append(to: &out)
        out += Array(#","group":"#.utf8)
        JSONValue.string(group).append(to: &out)
        out += Array(#","at":1}"#.utf8)
        return out
    }

    static func field(_ result: Result<RegistrationMessage, JobError>) -> String? {
        if case .failure(let error) = result { return error.field }
        return nil
    }

    @Test(arguments: [
        "a\u{0}b", "line\nbreak", "tab\there", "del\u{7F}", "c1\u{85}control", "esc\u{1B}[31m",
        String(repeating: "g", count: 201), "",
    ])
    func groupsWithControlCharactersOrOutOfBoundsAreMalformed(group: String) {
        #expect(Self.field(RegistrationMessage.parse(body: Self.register(group: group))) == "group")
        let groupJob = Array(#"{"group":"#.utf8) + { var out: [UInt8] = []; JSONValue.string(group).append(to: &out); return out }()
            + Array(#","payload":{"aps":{"content-available":1}}}"#.utf8)
        guard case .failure(let error) = GroupJobParser.parse(body: groupJob, messageID: nil) else {
            Issue.record("group job accepted with group \(group.debugDescription)")
            return
        }
        #expect(error.field == "group")
    }

    @Test(arguments: ["accountnamé 🎉", String(repeating: "g", count: 200), String(repeating: "é", count: 100), "a b"])
    func printableGroupsUpTo200BytesAreAccepted(group: String) throws {
        #expect(try RegistrationMessage.parse(body: Self.register(group: group)).get().group == group)
        let body = #"{"group":"\#(group)","payload":{"aps":{"content-available":1}}}"#
        #expect(try GroupJobParser.parse(body: Array(body.utf8), messageID: nil).get().group == group)
    }

    @Test(arguments: [
        "com.example\u{0}app", "com example", "com_example", "com.example/app", "é.app", "",
        String(repeating: "a", count: UntrustedText.maxBundleIDBytes + 1),
    ])
    func bundleIDsOutsideLettersDigitsDotAndDashAreMalformed(bundle: String) {
        #expect(Self.field(RegistrationMessage.parse(body: Self.register(bundle: bundle))) == "bundleId")
    }

    @Test func bundleIDsOfLettersDigitsDotsAndDashesUpTo155BytesAreAccepted() throws {
        for bundle in ["com.Example-App.2", String(repeating: "a", count: UntrustedText.maxBundleIDBytes)] {
            #expect(try RegistrationMessage.parse(body: Self.register(bundle: bundle)).get().bundleID == bundle)
        }
    }

    @Test func tokensAreHexUpToTheCap() throws {
        let longest = String(repeating: "ab", count: RegistrationMessage.maxTokenHexDigits / 2)
        #expect(try RegistrationMessage.parse(body: Self.register(token: longest)).get().token == longest)
        for token in [longest + "ab", "ab\u{0}", "", "zz", String(repeating: "a", count: 1_000)] {
            #expect(Self.field(RegistrationMessage.parse(body: Self.register(token: token))) == "token", "\(token.prefix(8))")
        }
    }

    /// `at` orders a device's changes, so one from far in the future would make every
    /// later change lose. At most `maxFutureMilliseconds` ahead of the reader's clock.
    @Test func anAtFarAheadOfTheClockIsMalformed() throws {
        let now: Int64 = 1_790_000_000_000
        func body(_ at: Int64) -> [UInt8] { Array(#"{"op":"unregister","bundleId":"b","token":"ab","at":\#(at)}"#.utf8) }
        let latest = now + RegistrationMessage.maxFutureMilliseconds
        #expect(try RegistrationMessage.parse(body: body(latest), now: now).get().at == latest)
        #expect(try RegistrationMessage.parse(body: body(0), now: now).get().at == 0, "the past is not bounded: messages wait in queues")
        for at in [latest + 1, Int64.max, now * 1000] {
            guard case .failure(let error) = RegistrationMessage.parse(body: body(at), now: now) else {
                Issue.record("accepted at \(at)")
                continue
            }
            #expect(error.field == "at" && error.message.contains("ahead of this worker's clock"), "\(error.message)")
        }
        // A clock near the end of time does not overflow.
        #expect(try RegistrationMessage.parse(body: body(Int64.max), now: Int64.max - 1).get().at == Int64.max)
    }

    /// The error says what is wrong with `at`, not a type it already has (`-1` was "must be an
    /// integer, got an integer").
    @Test(arguments: [
        ("-1", "must be 0 or more (ms since the epoch), got -1"),
        ("1.5", "must be a whole number of ms since the epoch, got a fraction or a number beyond 2^63−1"),
        ("9223372036854775808", "must be a whole number of ms since the epoch, got a fraction or a number beyond 2^63−1"),
        (#""1""#, "must be an integer (ms since the epoch), got a string"),
    ])
    func anAtThatIsNotAMomentSaysWhy(at: String, message: String) {
        let body = Array(#"{"op":"unregister","bundleId":"b","token":"ab","at":\#(at)}"#.utf8)
        guard case .failure(let error) = RegistrationMessage.parse(body: body) else {
            Issue.record("accepted at \(at)")
            return
        }
        #expect(error.field == "at" && error.message == message)
    }

    /// `group` is not needed on an unregister, but one that is there has §6's type and rule.
    @Test func aGroupOnAnUnregisterIsCheckedAndNotKept() throws {
        func body(_ group: String) -> [UInt8] { Array(#"{"op":"unregister","bundleId":"b","token":"ab","group":\#(group),"at":1}"#.utf8) }
        #expect(try RegistrationMessage.parse(body: body(#""acct""#)).get().group == nil)
        #expect(try RegistrationMessage.parse(body: body("null")).get().group == nil)
        for group in ["42", #""""#, #""a\nb""#, "[]"] {
            #expect(Self.field(RegistrationMessage.parse(body: body(group))) == "group", "\(group)")
        }
    }

    @Test func bodiesUpTo64KiBAreReadAndLargerOnesAreMalformed() throws {
        let head = #"{"op":"unregister","bundleId":"b","token":"ab","at":1,"pad":""#
        let fill = { (size: Int) in Array(head.utf8) + [UInt8](repeating: UInt8(ascii: "x"), count: size - head.utf8.count - 2) + Array(#""}"#.utf8) }
        #expect(try RegistrationMessage.parse(body: fill(64 * 1024)).get().op == .unregister)
        #expect(Self.field(RegistrationMessage.parse(body: fill(64 * 1024 + 1))) == "body")
    }
}
