/// `apns-worker-bench pure`: throughput of the pure codecs (APNSModel, APNSBinaryProtocol,
/// APNSProviderToken; no IO), for docs/benchmarks.md.
/// Each case runs a warm-up, then several rounds of a fixed number of iterations timed with a
/// monotonic clock; the fastest round is reported.
import APNSBinaryProtocol
import APNSModel
import APNSOutcome
import APNSProviderToken
import Crypto
import ArgumentParser
import Foundation

struct PureBench: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "pure",
        abstract: "Jobs parsed, binary frames encoded and decoded, outcomes classified per second."
    )

    @Option(help: "Timed iterations per case.")
    var iterations: Int = 200_000

    @Option(help: "Untimed iterations per case before timing.")
    var warmup: Int = 20_000

    @Option(help: "Timed rounds of `iterations` each; the fastest round is reported, which filters out time lost to other processes on a shared machine.")
    var rounds: Int = 5

    @Option(help: "Only the cases whose name contains this text (e.g. \"job parse\", to profile one case under callgrind).")
    var only: String?

    func validate() throws {
        guard iterations > 0, warmup >= 0, rounds > 0 else {
            throw ValidationError("iterations and rounds must be > 0, warmup >= 0")
        }
    }

    func run() throws {
        let cases = try PureBenchCase.all().filter { benchCase in only.map { benchCase.name.contains($0) } ?? true }
        print("fastest of \(rounds) rounds")
        print("case                                   iterations     total ms        ops/s      ns/op")
        var checksum = 0
        for benchCase in cases {
            checksum &+= benchCase.body(warmup)
            let clock = ContinuousClock()
            var fastest = Duration.seconds(Int64.max)
            for _ in 0..<rounds {
                var result = 0
                fastest = min(fastest, clock.measure { result = benchCase.body(iterations) })
                checksum &+= result
            }
            let seconds = fastest.timeInterval
            let perSecond = Double(iterations) / seconds
            let nanos = seconds * 1e9 / Double(iterations)
            print(
                benchCase.name.padding(toLength: 38, withPad: " ", startingAt: 0)
                    + pad(String(iterations), 11) + pad(String(format: "%.1f", seconds * 1000), 13)
                    + pad(String(format: "%.0f", perSecond), 13) + pad(String(format: "%.0f", nanos), 11))
        }
        // Printed so the optimizer cannot discard the work being measured.
        print("checksum \(checksum)")
    }

    private func pad(_ text: String, _ width: Int) -> String {
        String(repeating: " ", count: max(0, width - text.count)) + text
    }
}

/// One measured operation: `body(n)` performs it n times and returns a value derived from the
/// results.
struct PureBenchCase {
    var name: String
    var body: (Int) -> Int

    static func all() throws -> [PureBenchCase] {
        let token = String(repeating: "a1", count: 32)
        let smallBody = Array(#"""
            {"token":"\#(token)","payload":{"aps":{"alert":{"title":"Sync","body":"3 items changed"},"sound":"default"},"sync":"d41d8cd9"},"priority":10,"collapseId":"sync","id":"6f1d2c1e-6b1a-4e8c-9d6f-0123456789ab","userInfo":{"syncServer":"sync1.example.com"}}
            """#.utf8)
        let fill = String(repeating: "x", count: 3900)
        let largeBody = Array(#"{"token":"\#(token)","payload":{"aps":{"content-available":1},"blob":"\#(fill)"}}"#.utf8)
        let fixedID = UUID()
        let signingKey = P256.Signing.PrivateKey()

        func parseCase(_ name: String, _ body: [UInt8]) -> PureBenchCase {
            PureBenchCase(name: name) { n in
                var sum = 0
                for _ in 0..<n {
                    if case .success(let job) = JobParser.parse(
                        body: body, bundleID: "com.example.app", messageID: nil, defaultEnvironment: .production,
                        transport: .http2, makeID: { fixedID })
                    {
                        sum &+= job.payload.count
                    }
                }
                return sum
            }
        }

        guard case .success(let job) = JobParser.parse(
            body: smallBody, bundleID: "com.example.app", messageID: nil, defaultEnvironment: .production,
            transport: .binary, makeID: { fixedID })
        else { throw ValidationError("the benchmark job does not parse") }
        let frame = try BinaryNotificationFrame(notification: job.notification, identifier: 1)
        let encodedFrame = try frame.encoded()
        let errorResponses = (0..<1024).flatMap { i in
            BinaryErrorResponse(status: i % 2 == 0 ? .invalidToken : .processingError, identifier: UInt32(i)).encoded()
        }
        let results: [TransportResult] = [
            .http(HTTPAnswer(status: 200)), .http(HTTPAnswer(status: 410, reason: .unregistered, timestamp: 1)),
            .http(HTTPAnswer(status: 400, reason: .badPriority)), .binaryRejected(status: 8),
            .failed(.timeout),
        ]

        return [
            parseCase("job parse (\(smallBody.count) B body)", smallBody),
            parseCase("job parse (\(largeBody.count) B body)", largeBody),
            PureBenchCase(name: "binary frame encode (\(encodedFrame.count) B)") { n in
                var buffer: [UInt8] = []
                buffer.reserveCapacity(encodedFrame.count)
                var sum = 0
                for i in 0..<n {
                    buffer.removeAll(keepingCapacity: true)
                    var numbered = frame
                    numbered.identifier = UInt32(truncatingIfNeeded: i)
                    try? numbered.encode(into: &buffer)
                    sum &+= buffer.count
                }
                return sum
            },
            PureBenchCase(name: "binary frame decode (\(encodedFrame.count) B)") { n in
                var sum = 0
                for _ in 0..<n {
                    if case .frame(let decoded, let consumed) = BinaryNotificationFrame.decode(encodedFrame) {
                        sum &+= consumed &+ decoded.payload.count
                    }
                }
                return sum
            },
            PureBenchCase(name: "binary error response decode") { n in
                // A stream of distinct responses, decoded at successive offsets, so the work
                // cannot be hoisted out of the loop.
                var sum = 0
                errorResponses.withUnsafeBytes { stream in
                    let count = stream.count / BinaryProtocol.errorResponseLength
                    for i in 0..<n {
                        let offset = (i % count) * BinaryProtocol.errorResponseLength
                        let slice = UnsafeRawBufferPointer(rebasing: stream[offset...])
                        if case .response(let r) = BinaryErrorResponse.decode(slice) { sum &+= Int(r.identifier) }
                    }
                }
                return sum
            },
            PureBenchCase(name: "outcome classify") { n in
                var sum = 0
                for i in 0..<n {
                    if case .delivered = OutcomeClassifier.classify(results[i % results.count]) { sum &+= 1 }
                }
                return sum
            },
            PureBenchCase(name: "JWT sign (ES256 provider token)") { n in
                var sum = 0
                for i in 0..<n {
                    // A distinct iat per token, so each signature is real work.
                    let issued = Date(timeIntervalSince1970: 1_700_000_000 + Double(i))
                    if let token = try? ProviderToken.sign(teamID: "TEAM123456", keyID: "KEY1234567", key: signingKey, issuedAt: issued) {
                        sum &+= token.jwt.utf8.count
                    }
                }
                return sum
            },
        ]
    }
}
