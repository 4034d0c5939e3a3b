// The examples of docs/asyncapi-examples/ through the worker's own parsers, and the client's for
// what the worker writes and a sync server reads (feedback and delivery events): every
// `valid-*.json` must parse, every `invalid-<field>--<rule>.json` must be refused for <field>. The
// same files go through the JSON Schemas of docs/schemas/ in scripts/check-asyncapi.sh, so a
// schema and a parser that disagree fail one side or the other. A `schema-stricter-*.json` is
// text within a UTF-8 byte limit that the schema, counting characters, refuses: the parser must
// accept it (scripts/check-asyncapi.py checks that the schema refuses it). A
// `beyond-schema-<field>--<rule>.json` breaks a rule JSON Schema cannot say (a key twice,
// nesting, the reader's clock): the schema accepts it, the parser must refuse it for <field>. Cases for contract rules the
// parsers do not enforce yet are listed, with the rule, in
// docs/asyncapi-examples/pending-parser-rules.txt; a listed case the parser now gets right fails
// until it is taken off the list.
import APNSFleet
import APNSModel
import APNSRegistry
import APNSRegistryMessages
// Scoped: APNSModel has a DeliveryEvent of its own (the one the worker writes), and the module's
// name is also its client class's, so `APNSWorkerClient.DeliveryEvent` would not name this one.
import struct APNSWorkerClient.DeliveryEvent
import struct APNSWorkerClient.FeedbackEvent
import Foundation
import Testing
import TestSupport

struct ContractCorpusTests {
    static let corpus = repositoryRoot + "/docs/asyncapi-examples"

    /// The parser's verdict on one body: nil when it accepts it, else the field it names
    /// (an empty string when the parser names none).
    typealias Parser = @Sendable ([UInt8]) -> String??

    /// The kinds the worker reads, each with its parser, and the events the client reads, with
    /// the client's. Dead-letter and retry headers are what the worker writes and nothing here
    /// reads: their examples are checked against the schemas only.
    static let parsers: [String: Parser] = [
        "job": { body in
            verdict(JobParser.parse(body: body, bundleID: "com.example.app", messageID: nil, defaultEnvironment: .production, transport: .http2))
        },
        // A broadcast job travels on the same queues as a job and is read by the same parser (§7).
        "broadcast-job": { body in
            verdict(JobParser.parse(body: body, bundleID: "com.example.app", messageID: nil, defaultEnvironment: .production, transport: .http2))
        },
        "group-job": { body in verdict(GroupJobParser.parse(body: body, messageID: nil)) },
        "registration": { body in verdict(RegistrationMessage.parse(body: body)) },
        "fleet-message": { body in FleetMessage.decode(body) == nil ? .some("") : .some(nil) },
        "feedback-event": { body in
            if case .failure = FeedbackEvent.parse(body) { return .some("") }
            return .some(nil)
        },
        "delivery-event": { body in DeliveryEvent.parse(body) == nil ? .some("") : .some(nil) },
    ]
    /// The parsers that name no field: refusing the message is their whole answer.
    static let refuseWhole: Set<String> = ["fleet-message", "feedback-event", "delivery-event"]
    static let schemaOnly: Set<String> = ["dead-letter-headers", "retry-headers"]

    static func verdict<T>(_ result: Result<T, JobError>) -> String?? {
        switch result {
        case .success: return .some(nil)
        case .failure(let error): return .some(error.field)
        }
    }

    struct Case: CustomTestStringConvertible, Sendable {
        var kind: String
        var name: String
        var body: [UInt8]
        /// nil for a valid example, else the field the name says is at fault.
        var faultyField: String?
        var testDescription: String { "\(kind)/\(name)" }
    }

    static func cases() throws -> [Case] {
        var cases: [Case] = []
        for kind in try FileManager.default.contentsOfDirectory(atPath: corpus).sorted() {
            var isDirectory: ObjCBool = false
            guard FileManager.default.fileExists(atPath: corpus + "/" + kind, isDirectory: &isDirectory), isDirectory.boolValue else { continue }
            for file in try FileManager.default.contentsOfDirectory(atPath: corpus + "/" + kind).sorted() where file.hasSuffix(".json") {
                let name = String(file.dropLast(".json".count))
                let body = Array(try Data(contentsOf: URL(fileURLWithPath: corpus + "/" + kind + "/" + file)))
                var field: String? = nil
                if let prefix = ["invalid-", "beyond-schema-"].first(where: name.hasPrefix) {
                    let rest = name.dropFirst(prefix.count)
                    guard let separator = rest.range(of: "--") else { throw TestSupportError("\(kind)/\(file): name it \(prefix)<field>--<rule>") }
                    field = String(rest[..<separator.lowerBound])
                } else if !name.hasPrefix("valid-") && !name.hasPrefix("schema-stricter-") {
                    throw TestSupportError(
                        "\(kind)/\(file): name it valid-…, invalid-<field>--<rule>, beyond-schema-<field>--<rule> or schema-stricter-<field>--<why>")
                }
                cases.append(Case(kind: kind, name: name, body: body, faultyField: field))
            }
        }
        return cases
    }

    /// `kind/name` → the contract rule the parsers do not enforce yet.
    static func pending() throws -> [String: String] {
        let text = try String(contentsOfFile: corpus + "/pending-parser-rules.txt", encoding: .utf8)
        var pending: [String: String] = [:]
        for line in text.split(separator: "\n") where !line.hasPrefix("#") && !line.allSatisfy(\.isWhitespace) {
            let parts = line.split(separator: " ", maxSplits: 1).map(String.init)
            guard parts.count == 2, parts[1].hasPrefix("pending parser rule ") else {
                throw TestSupportError("pending-parser-rules.txt: \(line): write <kind>/<case> pending parser rule <rule>")
            }
            pending[parts[0]] = parts[1]
        }
        return pending
    }

    @Test func theCorpusIsLargeAndCoversEveryKind() throws {
        let cases = try Self.cases()
        #expect(cases.count >= 40)
        for kind in Set(Self.parsers.keys).union(Self.schemaOnly) {
            #expect(cases.contains { $0.kind == kind && $0.faultyField == nil }, "no valid \(kind) example")
            #expect(cases.contains { $0.kind == kind && $0.faultyField != nil }, "no invalid \(kind) example")
        }
        #expect(Set(cases.map(\.kind)) == Set(Self.parsers.keys).union(Self.schemaOnly))
        let names = Set(cases.map(\.testDescription))
        for listed in try Self.pending().keys {
            #expect(names.contains(listed), "pending-parser-rules.txt names \(listed), which is not in the corpus")
        }
    }

    @Test(arguments: try ContractCorpusTests.cases().filter { ContractCorpusTests.parsers[$0.kind] != nil })
    func parsersAgreeWithTheCorpus(_ example: Case) throws {
        let verdict = Self.parsers[example.kind]!(example.body)!
        let agrees: Bool
        if let field = example.faultyField {
            agrees = verdict == field || (Self.refuseWhole.contains(example.kind) && verdict == "")
        } else {
            agrees = verdict == nil
        }
        if let rule = try Self.pending()[example.testDescription] {
            #expect(!agrees, "\(example.testDescription) is listed as \(rule), but the parser now agrees: take it off pending-parser-rules.txt")
        } else {
            #expect(agrees, "\(example.testDescription): the parser says \(verdict.map { "refused, field \($0)" } ?? "accepted")")
        }
    }
}
