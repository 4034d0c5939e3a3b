/// Every job a soak published and the end it must reach, against the ends it was seen at: the
/// simulator's 200s (by job id, each time), the dead queues, the feedback exchange. Pure.
///
/// Contract §4: every job reaches exactly one end; a job is sent twice only when it was in flight
/// when a connection to the broker was lost (its ack with it), so duplicates are bounded by the
/// in-flight window per broker restart. A job whose publish was not confirmed and was published
/// again may be in the queue twice by the publisher's doing: each such id is allowed one more.
public enum ExpectedEnd: String, Sendable, Hashable {
    /// Accepted by APNs (a valid job, or one refused for a while by a hold).
    case delivered
    /// 410 `Unregistered`: a feedback event, acked, never dead.
    case feedback
    /// Not a job (the body is not JSON): the dead queue.
    case deadLetter
}

public struct JobLedger: Sendable {
    public private(set) var expected: [String: ExpectedEnd] = [:]
    /// Ids published more than once because a publish was not confirmed.
    public private(set) var republished: Set<String> = []
    /// Where and when each job was published, said of a job that is lost so that it can be
    /// traced in the worker's log and the run's events.
    public private(set) var origins: [String: String] = [:]

    public init() {}

    public var count: Int { expected.count }

    /// Records a job (its id compared case-insensitively, as APNs answers it in upper or lower case).
    /// `origin`: where and when it was published (a bundle, a time into the run).
    public mutating func published(_ id: String, expecting end: ExpectedEnd, origin: String? = nil) {
        expected[id.lowercased()] = end
        if let origin { origins[id.lowercased()] = origin }
    }

    public mutating func publishedAgain(_ id: String) {
        republished.insert(id.lowercased())
    }

    /// Where the jobs ended, as seen.
    public struct Seen: Sendable {
        /// Every 200 at the simulator, by id, duplicates included.
        public var delivered: [String]
        /// The dead queues' messages: id → `x-apns-reason` (or "" without one).
        public var dead: [String: String]
        /// Feedback events' job ids.
        public var feedback: Set<String>

        public init(delivered: [String], dead: [String: String], feedback: Set<String>) {
            self.delivered = delivered
            self.dead = dead
            self.feedback = feedback
        }
    }

    public struct Verdict: Sendable {
        public var published: Int
        /// Jobs that reached the end they had to.
        public var ended: Int
        /// Jobs seen at no end at all.
        public var lost: [String]
        /// The lost jobs, each with the end it had to reach and where it was published.
        public var lostDescribed: [String] = []
        /// Jobs meant to be delivered (or to give feedback) found in a dead queue, with the reason.
        public var goodDeadLettered: [(id: String, reason: String)]
        /// Jobs at an end other than theirs, not dead (a 200 for a job meant to be dead, …).
        public var wrongEnd: [String]
        public var duplicates: Int
        public var duplicateBound: Int

        /// Why the soak fails on jobs, one line each; empty when it does not.
        public var failures: [String] {
            var lines: [String] = []
            if !lost.isEmpty { lines.append("\(lost.count) of \(published) jobs lost (at no end): \(lostDescribed.prefix(10).joined(separator: ", "))") }
            if !goodDeadLettered.isEmpty {
                let examples = goodDeadLettered.prefix(3).map { "\($0.id) (\($0.reason))" }.joined(separator: ", ")
                lines.append("\(goodDeadLettered.count) good jobs dead-lettered, e.g. \(examples)")
            }
            if !wrongEnd.isEmpty { lines.append("\(wrongEnd.count) jobs at the wrong end, e.g. \(wrongEnd.prefix(3).joined(separator: ", "))") }
            if duplicates > duplicateBound {
                lines.append("\(duplicates) jobs sent twice; the contract allows at most \(duplicateBound) (the in-flight window per broker restart)")
            }
            return lines
        }
    }

    /// `windowPerRestart`: the most jobs the worker may hold unacked when a broker connection is
    /// lost (prefetch × bundles); `restarts`: how many times it was lost.
    public func verdict(_ seen: Seen, windowPerRestart: Int, restarts: Int) -> Verdict {
        var deliveredCounts: [String: Int] = [:]
        for id in seen.delivered { deliveredCounts[id.lowercased(), default: 0] += 1 }
        let dead = Dictionary(seen.dead.map { ($0.key.lowercased(), $0.value) }, uniquingKeysWith: { first, _ in first })
        let feedback = Set(seen.feedback.map { $0.lowercased() })
        var verdict = Verdict(
            published: expected.count, ended: 0, lost: [], goodDeadLettered: [], wrongEnd: [], duplicates: 0,
            duplicateBound: windowPerRestart * restarts + republished.count)
        for (id, end) in expected.sorted(by: { $0.key < $1.key }) {
            let delivered = deliveredCounts[id] ?? 0
            verdict.duplicates += max(0, delivered - 1)
            let reached: Bool
            switch end {
            case .delivered: reached = delivered > 0 && dead[id] == nil
            case .feedback: reached = feedback.contains(id) && dead[id] == nil && delivered == 0
            case .deadLetter: reached = dead[id] != nil && delivered == 0
            }
            if reached {
                verdict.ended += 1
            } else if end != .deadLetter, let reason = dead[id] {
                verdict.goodDeadLettered.append((id, reason))
            } else if delivered == 0 && dead[id] == nil && !feedback.contains(id) {
                verdict.lost.append(id)
                verdict.lostDescribed.append("\(id) (\(end.rawValue)\(origins[id].map { ", " + $0 } ?? ""))")
            } else {
                verdict.wrongEnd.append(id)
            }
        }
        return verdict
    }

    /// Whether every job has reached some end (the drain at the end of a run waits for this).
    public func allSeen(_ seen: Seen) -> Bool {
        let delivered = Set(seen.delivered.map { $0.lowercased() })
        let dead = Set(seen.dead.keys.map { $0.lowercased() })
        let feedback = Set(seen.feedback.map { $0.lowercased() })
        return expected.keys.allSatisfy { delivered.contains($0) || dead.contains($0) || feedback.contains($0) }
    }
}
