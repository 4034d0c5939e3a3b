import AMQPClient
import APNSConfig
import APNSRegistry
import APNSTopology
import APNSTopologyNames
import APNSTracing
import APNSWorkerClient
import Foundation
import Logging
import TestSupport
import Testing
import Tracing
import W3CTraceContext

/// Traces across the queue against a real OTLP/HTTP receiver (`scripts/otlp-receiver.sh`:
/// opentelemetry-proto decoding each ExportTraceServiceRequest): the sync server publishes through
/// the client library inside a span of its own, real `apns-worker run` processes continue that
/// trace, and the receiver gets its trace id with the expected spans and attributes; a group job's
/// span links to the creation spans of its fan-out, the parents of the fan-out's job spans.
/// Workers are stopped with SIGTERM before the spans are read: the exporter flushes on shutdown.
extension RegistryBrokerSuites {
@Suite(.serialized, .enabled(if: TestPostgres.isAvailable, "needs scripts/test's PostgreSQL and broker"))
struct TracingEndToEndTests {
    /// A JSON line of the receiver: one span.
    struct ExportedSpan: Decodable {
        var service: String?
        var traceId: String
        var spanId: String
        var parentSpanId: String
        var name: String
        var status: Int
        var attributes: [String: AttributeValue]
        var links: [Link]
        struct Link: Decodable { var traceId: String; var spanId: String }
    }

    enum AttributeValue: Decodable, Equatable {
        case string(String), int(Int64), bool(Bool), other
        init(from decoder: any Decoder) throws {
            let container = try decoder.singleValueContainer()
            if let value = try? container.decode(Int64.self) { self = .int(value) }
            else if let value = try? container.decode(Bool.self) { self = .bool(value) }
            else if let value = try? container.decode(String.self) { self = .string(value) }
            else { self = .other }
        }
    }

    /// The receiver process and the file it appends spans to.
    struct Receiver {
        let process: ChildProcess
        let output: String
        let endpoint: String

        static func start(in directory: String) async throws -> Receiver {
            let portFile = directory + "/otlp.port", output = directory + "/spans.jsonl"
            let process = try ChildProcess(
                repositoryRoot + "/scripts/otlp-receiver.sh", [portFile, output], logPath: directory + "/otlp-receiver.log")
            try await waitUntil("the OTLP receiver's port", timeout: .seconds(120)) { FileManager.default.fileExists(atPath: portFile) }
            let port = try String(contentsOfFile: portFile, encoding: .utf8)
            return Receiver(process: process, output: output, endpoint: "http://127.0.0.1:\(port)")
        }

        var raw: String { (try? String(contentsOfFile: output, encoding: .utf8)) ?? "" }

        func spans() throws -> [ExportedSpan] {
            try raw.split(separator: "\n").map { try JSONDecoder().decode(ExportedSpan.self, from: Data($0.utf8)) }
        }

        func stop() async {
            process.signal(SIGTERM)
            _ = await process.waitForExit(timeout: .seconds(10))
            // The receiver's HTTP server outlived SIGTERM: every run left three behind.
            process.kill9()
        }
    }

    /// A worker of `harness` with `[tracing]` lines appended to its configuration.
    func startWorker(_ harness: RegistryHarness, tracing: String?, name: String) throws -> ChildProcess {
        let path = harness.directory + "/\(name).conf"
        let base = try String(contentsOfFile: harness.configPath, encoding: .utf8)
        try (base + (tracing.map { "\n[tracing]\n\($0)\n" } ?? "")).write(toFile: path, atomically: true, encoding: .utf8)
        return try ChildProcess(
            workerExecutable, ["run", "--config", path], logPath: "\(harness.directory)/\(name).log",
            environment: ["APNS_WORKER_LOG_LEVEL": "info", "OTEL_BSP_SCHEDULE_DELAY": "200"])
    }

    /// The producer: the sync server's own tracer (swift-otel), whose context the client injects.
    func producer(_ receiver: Receiver) throws -> any Tracer {
        try TracingBackend.make(TracingSettings(endpoint: receiver.endpoint), logger: Logger(label: "producer")).tracer
    }

    /// Publishes inside a producer span of `tracer`, as a traced sync server does; returns the
    /// span's trace and span ids (hex).
    static func publishInSpan(
        _ tracer: any Tracer, _ client: APNSWorkerClient, _ jobs: [NotificationJob], groupJobs: [GroupNotificationJob] = []
    ) async throws -> (traceID: String, spanID: String) {
        let span = tracer.startSpan("sync change", ofKind: .producer)
        defer { span.end() }
        let context = span.context
        try await ServiceContext.withValue(context) {
            for job in jobs { try await client.publish(job) }
            for job in groupJobs { try await client.publish(job) }
        }
        return try traceContext(of: span, tracer: tracer)
    }

    static func traceContext(of span: any Span, tracer: any Tracer) throws -> (traceID: String, spanID: String) {
        var envelope = JobEnvelope(nil)
        tracer.inject(span.context, into: &envelope, using: JobEnvelopeTraceInjector())
        let context = try #require(envelope.traceContext)
        return ("\(context.traceID)", "\(context.spanID)")
    }

    /// Runs `body` with a registry harness (no worker of its own: each test starts the traced
    /// `apns-worker run` it needs), an OTLP receiver, and a client publishing through a producer
    /// tracer that exports to it; closes the client and stops the receiver afterwards.
    func withTracedClient(_ body: (RegistryHarness, Receiver, any Tracer, APNSWorkerClient) async throws -> Void) async throws {
        let harness = try await RegistryHarness.start()
        let receiver = try await Receiver.start(in: harness.directory)
        let tracer = try producer(receiver)
        let client = try await APNSWorkerClient.connect(urls: [try TestBroker.require().amqpURL], instrument: tracer)
        do {
            try await harness.withWorkers([]) { _ in try await body(harness, receiver, tracer, client) }
        } catch {
            await client.close()
            await receiver.stop()
            throw error
        }
        await client.close()
        await receiver.stop()
    }

    @Test func aJobAndAGroupJobArriveWithTheProducersTraceIdAndTheExpectedSpans() async throws {
        try await withTracedClient { harness, receiver, tracer, client in
            let (universal, iphone) = (harness.bundles[0], harness.bundles[1])
            let tokens = (1...3).map(RegistryHarness.token)
            let group = uniqueName("account")
            // A producer the operator trusts: its span is the parent (`parentBased = true`).
            let worker = try startWorker(
                harness, tracing: "endpoint = \(receiver.endpoint)\nserviceName = apns-worker-e2e\nparentBased = true", name: "traced")
            defer { worker.kill9() }
            try await client.publish(Registration.register(bundleID: universal, token: tokens[0], group: group))
            try await client.publish(Registration.register(bundleID: iphone, token: tokens[1], group: group))
            // In the store, not the broker's queue count: the management API samples its counts,
            // so an empty queue there can be read before the registrations were even counted.
            try await TestPostgres.withStore(harness.registry) { store in
                try await waitUntil("registrations applied", timeout: .seconds(60)) {
                    try await store.activeDevices(group: group, after: nil, limit: 10).count == 2
                }
            }
            let producer = try await Self.publishInSpan(
                tracer, client, [NotificationJob(bundleID: universal, token: tokens[2], payload: .alert("Hello"))],
                groupJobs: [GroupNotificationJob(group: group, payload: .alert("Changed"))])
            do {
                try await waitUntil("three deliveries", timeout: .seconds(120)) {
                    harness.accepted(universal).count == 2 && harness.accepted(iphone).count == 1
                }
            } catch {
                // The worker's own account of what it did, before the harness's directory goes.
                let log = (try? String(contentsOfFile: "\(harness.directory)/traced.log", encoding: .utf8)) ?? "(no log)"
                let tail = log.split(separator: "\n").suffix(80).joined(separator: "\n")
                let accepted = "accepted: \(harness.accepted(universal).count) for \(universal), \(harness.accepted(iphone).count) for \(iphone)"
                Issue.record(Comment(rawValue: accepted + "; the worker's log ends:\n" + tail))
                throw error
            }
            await harness.stop(worker)

            let spans = try receiver.spans().filter { $0.traceId == producer.traceID }
            let jobSpans = spans.filter { [universal, iphone].map { "process \(TopologyNames.workQueue($0))" }.contains($0.name) }
            #expect(jobSpans.count == 3, "\(spans.map(\.name))")
            #expect(spans.allSatisfy { $0.service == "apns-worker-e2e" })
            // The single job: a child of the producer's span, with parse, send and settle under it.
            let direct = try #require(jobSpans.first { $0.parentSpanId == producer.spanID })
            #expect(direct.attributes["apns.bundle"] == .string(universal))
            #expect(direct.attributes["apns.outcome"] == .string("delivered"))
            let children = spans.filter { $0.parentSpanId == direct.spanId }
            #expect(Set(children.map(\.name)) == ["parse", "send", "settle"])
            let send = try #require(children.first { $0.name == "send" })
            #expect(send.attributes["apns.status"] == .int(200))
            #expect(send.attributes["apns.transport"] == .string("http2"))
            if case .string(let apnsID)? = send.attributes["apns.id"] {
                #expect(UUID(uuidString: apnsID) != nil)
            } else {
                Issue.record("no apns.id on the send span: \(send.attributes)")
            }
            #expect(children.first { $0.name == "settle" }?.attributes["apns.outcome"] == .string("delivered"))
            #expect(children.first { $0.name == "parse" }?.attributes["apns.target.kind"] == .string("device"))
            // The group job: its span continues the producer's trace and links to the creation
            // span of each fan-out job, which is the parent of that job's span.
            let groupSpan = try #require(spans.first { $0.name == "process \(TopologyNames.groups)" })
            #expect(groupSpan.parentSpanId == producer.spanID)
            #expect(groupSpan.links.count == 2)
            let fanOutParents = Set(jobSpans.filter { $0.parentSpanId != producer.spanID }.map(\.parentSpanId))
            #expect(Set(groupSpan.links.map(\.spanId)) == fanOutParents, "\(groupSpan.links) vs \(fanOutParents)")
            #expect(groupSpan.links.allSatisfy { $0.traceId == producer.traceID })
            let bundles = jobSpans.map { $0.attributes["apns.bundle"] ?? .other }
            #expect(Set(bundles.map { "\($0)" }) == Set([universal, iphone].map { "\(AttributeValue.string($0))" }))
            // Never a device token, in any attribute.
            for token in tokens { #expect(!receiver.raw.lowercased().contains(token.lowercased())) }
        }
    }

    /// The default (`parentBased = false`): the job's span is the root of a trace of
    /// the worker's own, with a link to the producer's span, so the trace stays reachable while
    /// the producer's sampled flag decides nothing.
    @Test func byDefaultAJobSpanStartsItsOwnTraceLinkedToTheProducers() async throws {
        try await withTracedClient { harness, receiver, tracer, client in
            let bundle = harness.bundles[0]
            let worker = try startWorker(harness, tracing: "endpoint = \(receiver.endpoint)", name: "linked")
            defer { worker.kill9() }
            let producer = try await Self.publishInSpan(
                tracer, client, [NotificationJob(bundleID: bundle, token: RegistryHarness.token(30), payload: .alert("Hi"))])
            try await waitUntil("the job delivered", timeout: .seconds(120)) { harness.accepted(bundle).count == 1 }
            await harness.stop(worker)
            let spans = try receiver.spans()
            let job = try #require(spans.first { $0.name == "process \(TopologyNames.workQueue(bundle))" }, "\(spans.map(\.name))")
            #expect(job.traceId != producer.traceID)
            #expect(job.parentSpanId.isEmpty || job.parentSpanId == String(repeating: "0", count: 16), "a root: \(job.parentSpanId)")
            #expect(job.links.contains { $0.traceId == producer.traceID && $0.spanId == producer.spanID }, "\(job.links)")
            #expect(Set(spans.filter { $0.parentSpanId == job.spanId }.map(\.name)) == ["parse", "send", "settle"])
        }
    }

    @Test func sampleRatioZeroExportsNothingWhateverTheProducerSampledAndWithoutAnEndpointNothingIsExported() async throws {
        try await withTracedClient { harness, receiver, tracer, client in
            let bundle = harness.bundles[0]
            // By default the producer's sampled flag does not force sampling.
            for (index, tracing) in ["endpoint = \(receiver.endpoint)\nsampleRatio = 0", nil].enumerated() {
                let worker = try startWorker(harness, tracing: tracing, name: "worker-\(index)")
                defer { worker.kill9() }
                _ = try await Self.publishInSpan(
                    tracer, client, [NotificationJob(bundleID: bundle, token: RegistryHarness.token(10 + index), payload: .alert("Hi"))])
                try await waitUntil("the job delivered", timeout: .seconds(120)) { harness.accepted(bundle).count == index + 1 }
                await harness.stop(worker)
                #expect(worker.log.contains("tracing on") == (tracing != nil))
                #expect(receiver.raw.isEmpty, "nothing exported: \(receiver.raw.prefix(500))")
            }
        }
    }
}
}
