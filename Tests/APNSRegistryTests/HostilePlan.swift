import AMQPClient
import APNSFleet
import APNSJSON
import APNSModel
import APNSRegistryMessages
import APNSTopologyNames
import Foundation

@testable import APNSRegistry

/// The messages of one hostile-publisher run, shuffled: valid ones of every kind and random
/// mutations of them. What must become of a mutated message is decided by the worker's own
/// parsers (the same code the worker binary is built from): refused means it must end in the
/// `.dead` queue beside its queue, body unchanged; accepted means anything the contract allows.
struct HostilePlan {
    /// One message to publish, and what must become of it.
    struct Planned {
        enum Expect { case delivered([String]), dead(String), applied, anything }
        var kind: String
        var message: AMQPOutboundMessage
        var expect: Expect
        /// Its dead letter must carry the x-apns-* headers (an envelope case, not a body the
        /// broker dead-letters itself).
        var deadLetterHeaders = false
    }

    var mutations: HostileMutations
    let seed: UInt64
    let bundles: [String]
    /// The registered group valid group jobs fan out to, and its devices.
    let group: String
    let members: [(String, String)]
    /// The publisher's broker user: the one `user_id` the broker lets it send.
    let user: String
    var next = 0

    /// Where the storm's valid registrations go (and nothing else).
    var stormGroup: String { "storm-\(seed)" }

    init(seed: UInt64, bundles: [String], group: String, members: [(String, String)], user: String) {
        self.user = user
        self.mutations = HostileMutations(seed: seed)
        self.seed = seed
        self.bundles = bundles
        self.group = group
        self.members = members
    }

    mutating func make(count: Int) -> [Planned] {
        var out: [Planned] = []
        for _ in 0..<count {
            let roll = Int.random(in: 0..<100, using: &mutations.rng)
            let item: Planned =
                switch roll {
                case 0..<15: validJob(headers: false)
                case 15..<25: validJob(headers: true)
                case 25..<28: validJobThroughRetryQueue()
                case 28..<50: mutatedJob()
                case 50..<58: validRegistration()
                case 58..<75: mutatedRegistration()
                case 75..<77: validGroupJob()
                case 77..<87: mutatedGroupJob()
                case 87..<93: envelope()
                default: forgedHeartbeat()
                }
            out.append(item)
        }
        return out
    }

    mutating func fresh() -> Int {
        next += 1
        return next
    }

    func token(_ n: Int) -> String { RegistryHarness.token(Int(seed % 1_000_000) * 10_000 + n) }

    func jobObject(_ id: UUID, token: String) -> [String: JSONValue] {
        ["token": .string(token), "id": .string(id.uuidString.lowercased()), "payload": .object(["aps": .object(["alert": .string("hostile \(id)")])])]
    }

    static func encode(_ object: [String: JSONValue]) -> [UInt8] {
        var out: [UInt8] = []
        JSONValue.object(object).append(to: &out)
        return out
    }

    mutating func validJob(headers: Bool) -> Planned {
        let id = UUID()
        let bundle = mutations.pick(bundles)
        let properties = headers ? mutations.properties(headers: mutations.headersCountingAsAbsent()) : AMQPProperties.persistentJSON
        let message = AMQPOutboundMessage(
            exchange: TopologyNames.jobsExchange, routingKey: bundle, body: Self.encode(jobObject(id, token: token(fresh()))), properties: properties)
        return Planned(kind: headers ? "job, hostile headers" : "job", message: message, expect: .delivered([id.uuidString.lowercased()]))
    }

    /// A retry queue dead-letters into the work queue: the worker reads what anyone puts there.
    mutating func validJobThroughRetryQueue() -> Planned {
        let id = UUID()
        let bundle = mutations.pick(bundles)
        let message = AMQPOutboundMessage(
            exchange: "", routingKey: TopologyNames.retryQueue(bundle, delay: .milliseconds(300)),
            body: Self.encode(jobObject(id, token: token(fresh()))),
            properties: mutations.properties(headers: mutations.headersCountingAsAbsent(forgedDeath: false)))
        return Planned(kind: "job via retry queue", message: message, expect: .delivered([id.uuidString.lowercased()]))
    }

    mutating func mutatedJob() -> Planned {
        let bundle = mutations.pick(bundles)
        var object = jobObject(UUID(), token: token(fresh()))
        if mutations.chance(0.3) { object["collapseId"] = .string("c") }
        if mutations.chance(0.3) { object["priority"] = .integer(5) }
        if mutations.chance(0.3) { object["expiration"] = .integer(0) }
        let body = mutations.mutate(object)
        let properties = mutations.properties(headers: nil)
        let parsed = JobParser.parse(body: body, bundleID: bundle, messageID: properties.messageID, defaultEnvironment: .production, transport: .http2)
        let expect: Planned.Expect = if case .failure = parsed { .dead(TopologyNames.deadQueue(bundle)) } else { .anything }
        return Planned(
            kind: "job, mutated", message: AMQPOutboundMessage(exchange: TopologyNames.jobsExchange, routingKey: bundle, body: body, properties: properties),
            expect: expect)
    }

    func registrationObject(op: String, token: String, group: String) -> [String: JSONValue] {
        ["op": .string(op), "bundleId": .string(bundles[0]), "token": .string(token), "group": .string(group), "at": .integer(10)]
    }

    mutating func validRegistration() -> Planned {
        let body = Self.encode(registrationObject(op: "register", token: token(fresh()), group: stormGroup))
        return Planned(
            kind: "registration", message: AMQPOutboundMessage(exchange: TopologyNames.registry, routingKey: "", body: body, properties: .persistentJSON),
            expect: .applied)
    }

    mutating func mutatedRegistration() -> Planned {
        // Never the storm's group or the fan-out group: a mutation that stays valid changes neither.
        let object = registrationObject(op: mutations.pick(["register", "unregister"]), token: token(fresh()), group: "mutant-\(seed)")
        let body = mutations.mutate(object)
        let expect: Planned.Expect = if case .failure = RegistrationMessage.parse(body: body) { .dead(TopologyNames.registryDead) } else { .anything }
        let message = AMQPOutboundMessage(exchange: TopologyNames.registry, routingKey: "", body: body, properties: mutations.properties(headers: nil))
        return Planned(kind: "registration, mutated", message: message, expect: expect)
    }

    func groupJobObject(_ id: UUID) -> [String: JSONValue] {
        ["group": .string(group), "id": .string(id.uuidString.lowercased()), "pushType": .string("alert"),
         "payload": .object(["aps": .object(["alert": .string("group \(id)")])])]
    }

    mutating func validGroupJob() -> Planned {
        let id = UUID()
        let ids = members.map { UUIDv5.fanOutJobID(groupJobID: id, bundleID: $0.0, token: $0.1).uuidString.lowercased() }
        let message = AMQPOutboundMessage(exchange: TopologyNames.groups, routingKey: "", body: Self.encode(groupJobObject(id)), properties: .persistentJSON)
        return Planned(kind: "group job", message: message, expect: .delivered(ids))
    }

    mutating func mutatedGroupJob() -> Planned {
        var object = groupJobObject(UUID())
        if mutations.chance(0.3) { object["except"] = .array([.string(members[0].1)]) }
        if mutations.chance(0.3) { object["collapseId"] = .string("c") }
        let body = mutations.mutate(object)
        let properties = mutations.properties(headers: nil)
        let parsed = GroupJobParser.parse(body: body, messageID: properties.messageID)
        let expect: Planned.Expect = if case .failure = parsed { .dead(TopologyNames.groupsDead) } else { .anything }
        return Planned(kind: "group job, mutated", message: AMQPOutboundMessage(exchange: TopologyNames.groups, routingKey: "", body: body, properties: properties), expect: expect)
    }

    /// A valid message of any kind the worker reads in a hostile envelope (contract §4 "The AMQP
    /// envelope is input too"): its properties at their edges, with or without a header table
    /// over the 16 KiB bound (then it is malformed whatever its body).
    mutating func envelope() -> Planned {
        var item: Planned =
            switch Int.random(in: 0..<5, using: &mutations.rng) {
            case 0, 1: validJob(headers: false)
            case 2: validRegistration()
            case 3: validGroupJob()
            default: forgedHeartbeat()
            }
        var properties = mutations.envelopeProperties(user: user)
        let oversized = mutations.chance(0.4)
        if oversized { properties.headers = mutations.oversizedHeaders() }
        item.message.properties = properties
        item.kind = "envelope, " + item.kind + (oversized ? ", headers over 16 KiB" : "")
        if oversized {
            switch item.message.exchange {
            case TopologyNames.jobsExchange: item.expect = .dead(TopologyNames.deadQueue(item.message.routingKey))
            case TopologyNames.registry: item.expect = .dead(TopologyNames.registryDead)
            case TopologyNames.groups: item.expect = .dead(TopologyNames.groupsDead)
            default: item.expect = .anything  // a heartbeat the worker cannot use is ignored
            }
            if case .dead = item.expect { item.deadLetterHeaders = true }
        }
        return item
    }

    /// Forged heartbeats: well-formed ones of made-up instances (short-lived, another bundle),
    /// and broken ones naming the real bundles with counts that trapped listeners before.
    mutating func forgedHeartbeat() -> Planned {
        let n = fresh()
        var instance = FleetInstance(
            id: "hostile-\(n % 50)", host: "hostile-forger", pid: 1, version: "0", startedAt: Date(), rssBytes: 1, cpuSeconds: 0,
            broker: "connected", heartbeatInterval: 1, bundles: ["hostile.forged": FleetInstance.Bundle(delivered: n)])
        var body = FleetMessage.heartbeat(instance).encoded()
        if mutations.chance(0.6) {
            instance.bundles = [mutations.pick(bundles): FleetInstance.Bundle(delivered: 7)]
            let text = String(decoding: FleetMessage.heartbeat(instance).encoded(), as: UTF8.self)
            let value = mutations.pick(["-9223372036854775808", "0", "9223372036854775807", "-1", "9007199254740993", "1e400", "\"x\""])
            body = Array(text.replacingOccurrences(of: #""delivered":7"#, with: #""delivered":\#(value)"#).utf8)
        }
        if mutations.chance(0.2) { body = mutations.mutate(["kind": .string("heartbeat"), "instance": .object([:])]) }
        let message = AMQPOutboundMessage(
            exchange: TopologyNames.fleetExchange, routingKey: "", body: body,
            properties: AMQPProperties(contentType: "application/json", deliveryMode: 1), mandatory: false)
        return Planned(kind: "heartbeat, forged", message: message, expect: .anything)
    }
}
