import APNSModel
import Testing

/// `JobEnd`, the one vocabulary of a job's end: its two spellings are stored and on
/// the wire, so this table pins them. A label change renames a Prometheus series and a key of
/// `/api/status`; a contract name change orphans rows PostgreSQL already holds.
@Suite struct JobEndTests {
    static let spellings: [(end: JobEnd, label: String, contractName: String?)] = [
        (.delivered, "delivered", "delivered"),
        (.invalidToken, "invalid_token", "invalidToken"),
        (.retry, "retry", "retry"),
        (.dead, "dead", "dead"),
        (.held, "held", nil),
        (.gated, "gated", "gated"),
        (.fannedOut, "fanned_out", "fannedOut"),
        (.coalesced, "coalesced", "coalesced"),
        (.trailing, "trailing", "trailing"),
    ]

    @Test func everyEndHasItsFixedSpellings() {
        #expect(Self.spellings.map(\.end) == JobEnd.allCases)
        for row in Self.spellings {
            #expect(row.end.label == row.label)
            #expect(row.end.contractName == row.contractName)
            #expect(JobEnd(label: row.label) == row.end)
            if let name = row.contractName { #expect(JobEnd(contractName: name) == row.end) }
        }
        #expect(JobEnd(contractName: "held") == nil, "held is no end the registry stores")
        #expect(JobEnd(contractName: "invalid_token") == nil)
        #expect(JobEnd(label: "invalidToken") == nil)
    }

    /// The lists each reader iterates, in the order they show them: the pipeline's counters
    /// (`apns_worker_jobs_total{outcome}`), the registry's columns (`apns-worker stats`, the
    /// admin chart), the group counter's kinds and the fleet's rates.
    @Test func eachReaderSeesItsEndsInItsOrder() {
        #expect(JobEnd.pipelineEnds.map(\.label) == ["delivered", "invalid_token", "retry", "dead", "held", "gated"])
        #expect(
            JobEnd.registryEnds.compactMap(\.contractName)
                == ["delivered", "invalidToken", "retry", "dead", "gated", "fannedOut", "coalesced", "trailing"])
        #expect(JobEnd.groupEnds.compactMap(\.contractName) == ["fannedOut", "coalesced", "trailing"])
        #expect(JobEnd.fleetEnds.compactMap(\.contractName) == ["delivered", "invalidToken", "retry", "dead"])
    }
}
