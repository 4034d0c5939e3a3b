/// The binary provider API's replay state machine, driven without sockets: every status code at
/// every position in the buffer, shutdown (10), silent closes, backpressure, identifier
/// wraparound, and a randomized run against a model of Apple's gateway.
import APNSBinaryProtocol
import APNSModel
import APNSOutcome
import SeededRandom
import Testing

/// Drives one machine with `Int` requests and records what it asked for.
private struct Harness {
    typealias Machine = BinaryReplayStateMachine<Int>
    var machine: Machine
    let start = ContinuousClock.now
    var now: ContinuousClock.Instant
    /// Writes on the current connection, in order.
    var written: [(identifier: UInt32, request: Int, replay: Bool)] = []
    var allIdentifiers: [UInt32] = []
    var results: [Int: [TransportResult]] = [:]
    var timer: ContinuousClock.Instant?
    var closeRequested = false
    var unmatched: [BinaryErrorResponse] = []

    init(capacity: Int = 100, holdWindow: Duration = .milliseconds(200), firstIdentifier: UInt32 = 1) {
        machine = Machine(capacity: capacity, holdWindow: holdWindow, maxQueueWait: .seconds(5), firstIdentifier: firstIdentifier)
        now = start
    }

    /// The socket takes every write at once (`written(through:)` right after the writes);
    /// false models a stalled connection whose writes sit in our buffers.
    var socketTakesWrites = true

    mutating func apply(_ actions: [Machine.Action]) {
        var lastWrite: UInt32?
        defer {
            if socketTakesWrites, let lastWrite { apply(machine.written(through: lastWrite, now: now)) }
        }
        for action in actions {
            switch action {
            case .write(let identifier, let request, let replay):
                written.append((identifier, request, replay))
                allIdentifiers.append(identifier)
                lastWrite = identifier
            case .complete(let request, let result):
                results[request, default: []].append(result)
            case .scheduleHoldTimer(let at):
                timer = at
            case .closeConnection:
                closeRequested = true
            case .unmatchedErrorResponse(let response):
                unmatched.append(response)
            }
        }
    }

    mutating func connect() {
        written = []
        closeRequested = false
        apply(machine.connected(now: now))
    }

    mutating func submit(_ requests: some Sequence<Int>) {
        for request in requests { apply(machine.submit(request, now: now)) }
    }

    mutating func error(_ status: UInt8, naming identifier: UInt32) {
        apply(machine.errorResponse(BinaryErrorResponse(status: BinaryStatus(rawValue: status), identifier: identifier), now: now))
    }

    mutating func close() {
        apply(machine.connectionClosed(reason: "test", now: now))
    }

    /// Moves the clock on and fires the hold timer if it is due.
    mutating func advance(_ duration: Duration) {
        now += duration
        if let due = timer, due <= now {
            timer = nil
            apply(machine.holdWindowElapsed(now: now))
        }
    }

    func identifier(of request: Int) -> UInt32 {
        written.last { $0.request == request }!.identifier
    }

    func only(_ request: Int) -> TransportResult? {
        guard let list = results[request], list.count == 1 else { return nil }
        return list[0]
    }
}

@Suite struct BinaryReplayTests {
    @Test func framesAreDeliveredOnlyAfterTheHoldWindow() {
        var h = Harness()
        h.connect()
        h.submit(0..<3)
        #expect(h.written.map(\.request) == [0, 1, 2])
        #expect(h.written.map(\.identifier) == [1, 2, 3])
        #expect(h.written.allSatisfy { !$0.replay })
        #expect(h.timer == h.start + .milliseconds(200))
        h.advance(.milliseconds(199))
        #expect(h.results.isEmpty)
        h.advance(.milliseconds(1))
        #expect((0..<3).allSatisfy { h.only($0) == .binaryAccepted })
        #expect(h.machine.heldCount == 0)
        #expect(h.timer == nil)
    }

    /// A stalled connection: frames the socket has not taken never count as delivered, however
    /// long they wait; their window starts when the write completes, and a silent close then
    /// replays them.
    @Test func framesNotYetTakenByTheSocketAreNeverDelivered() {
        var h = Harness()
        h.socketTakesWrites = false
        h.connect()
        h.submit(0..<3)
        #expect(h.written.map(\.request) == [0, 1, 2])
        #expect(h.timer == nil, "no window runs before a write completes")
        h.advance(.seconds(60))
        #expect(h.results.isEmpty)
        // The socket takes the first two: their window starts now.
        h.apply(h.machine.written(through: h.identifier(of: 1), now: h.now))
        h.advance(.milliseconds(199))
        #expect(h.results.isEmpty)
        h.advance(.milliseconds(1))
        #expect(h.only(0) == .binaryAccepted && h.only(1) == .binaryAccepted)
        #expect(h.results[2] == nil)
        // A late completion from a closed connection changes nothing on the next one.
        let stale = h.identifier(of: 2)
        h.close()
        h.connect()
        h.apply(h.machine.written(through: stale, now: h.now))
        h.advance(.seconds(1))
        #expect(h.results[2] == nil, "the replayed frame waits for its own write")
        h.apply(h.machine.written(through: h.identifier(of: 2), now: h.now))
        h.advance(.milliseconds(200))
        #expect(h.only(2) == .binaryAccepted)
    }

    @Test func framesWrittenLaterWaitForTheirOwnWindow() {
        var h = Harness()
        h.connect()
        h.submit([0])
        h.advance(.milliseconds(150))
        h.submit([1])
        h.advance(.milliseconds(50))
        #expect(h.only(0) == .binaryAccepted)
        #expect(h.results[1] == nil)
        #expect(h.timer == h.start + .milliseconds(350))
        h.advance(.milliseconds(150))
        #expect(h.only(1) == .binaryAccepted)
    }

    @Test func requestsWaitForAConnection() {
        var h = Harness()
        h.submit(0..<2)
        #expect(h.written.isEmpty)
        #expect(h.machine.queuedCount == 2)
        h.connect()
        #expect(h.written.map(\.request) == [0, 1])
    }

    static let failureStatuses: [UInt8] = [1, 2, 3, 4, 5, 6, 7, 8, 128, 255]

    /// Five frames 0…4; the error names the frame at `position`: earlier ones are delivered, the
    /// named one gets the status, later ones are written again on the next connection.
    @Test(arguments: failureStatuses, [0, 2, 4])
    func errorResponseSettlesTheNamedFrameAndReplaysTheRest(status: UInt8, position: Int) {
        var h = Harness()
        h.connect()
        h.submit(0..<5)
        h.advance(.milliseconds(50))
        h.error(status, naming: h.identifier(of: position))
        #expect(h.closeRequested)
        for request in 0..<position { #expect(h.only(request) == .binaryAccepted) }
        #expect(h.only(position) == .binaryRejected(status: status))
        for request in (position + 1)..<5 { #expect(h.results[request] == nil) }
        #expect(h.machine.connection == .draining)

        // Nothing more is written on the failed connection.
        h.submit([5])
        #expect(h.written.count == 5)
        h.close()
        h.connect()
        let replayed = Array((position + 1)..<5)
        #expect(h.written.map(\.request) == replayed + [5])
        #expect(h.written.map(\.replay) == replayed.map { _ in true } + [false])
        #expect(Set(h.allIdentifiers).count == h.allIdentifiers.count, "identifiers are never reused")
        h.advance(.milliseconds(200))
        for request in (position + 1)...5 { #expect(h.only(request) == .binaryAccepted) }
        #expect(h.results.values.allSatisfy { $0.count == 1 })
        #expect(OutcomeClassifier.classify(h.only(position)!) == OutcomeClassifier.classify(binaryStatus: BinaryStatus(rawValue: status)))
    }

    @Test func statusEightIsAnInvalidToken() {
        var h = Harness()
        h.connect()
        h.submit([0])
        h.error(8, naming: h.identifier(of: 0))
        #expect(OutcomeClassifier.classify(h.only(0)!) == .invalidToken(reason: "InvalidToken", timestamp: nil))
    }

    /// Shutdown (10) names the last frame Apple processed: it and everything before it are
    /// delivered, nothing fails, the rest is written again.
    @Test(arguments: [0, 2, 4])
    func shutdownNamesTheLastGoodFrame(position: Int) {
        var h = Harness()
        h.connect()
        h.submit(0..<5)
        h.error(10, naming: h.identifier(of: position))
        for request in 0...position { #expect(h.only(request) == .binaryAccepted) }
        h.close()
        h.connect()
        #expect(h.written.map(\.request) == Array((position + 1)..<5))
        h.advance(.milliseconds(200))
        #expect((0..<5).allSatisfy { h.only($0) == .binaryAccepted })
    }

    @Test func severalFailuresInARow() {
        var h = Harness()
        h.connect()
        h.submit(0..<6)
        h.error(8, naming: h.identifier(of: 2))
        h.close()
        h.connect()
        #expect(h.written.map(\.request) == [3, 4, 5])
        // The first replayed frame is bad too.
        h.error(8, naming: h.identifier(of: 3))
        h.close()
        h.connect()
        #expect(h.written.map(\.request) == [4, 5])
        // And now the last one.
        h.error(7, naming: h.identifier(of: 5))
        h.close()
        h.connect()
        #expect(h.written.isEmpty)
        h.advance(.milliseconds(200))
        #expect(h.only(0) == .binaryAccepted)
        #expect(h.only(1) == .binaryAccepted)
        #expect(h.only(2) == .binaryRejected(status: 8))
        #expect(h.only(3) == .binaryRejected(status: 8))
        #expect(h.only(4) == .binaryAccepted)
        #expect(h.only(5) == .binaryRejected(status: 7))
    }

    @Test func adjacentBadFramesFailOneConnectionEach() {
        var h = Harness()
        h.connect()
        h.submit(0..<4)
        h.error(8, naming: h.identifier(of: 1))
        h.close()
        h.connect()
        h.error(8, naming: h.identifier(of: 2))
        h.close()
        h.connect()
        h.advance(.milliseconds(200))
        #expect([0, 1, 2, 3].map { h.only($0) } == [.binaryAccepted, .binaryRejected(status: 8), .binaryRejected(status: 8), .binaryAccepted])
    }

    /// A close without an error packet: frames past their window were delivered already; those
    /// still inside it are written again.
    @Test func silentCloseReplaysFramesInsideTheWindow() {
        var h = Harness()
        h.connect()
        h.submit(0..<2)
        h.advance(.milliseconds(100))
        h.submit(2..<4)
        h.advance(.milliseconds(100))
        #expect(h.only(0) == .binaryAccepted)
        #expect(h.only(1) == .binaryAccepted)
        h.close()
        #expect(h.machine.connection == .disconnected)
        #expect(h.results[2] == nil && h.results[3] == nil)
        h.advance(.milliseconds(500))  // a stale timer on no connection delivers nothing
        #expect(h.results[2] == nil)
        h.connect()
        #expect(h.written.map(\.request) == [2, 3])
        #expect(h.written.allSatisfy { $0.replay })
        h.advance(.milliseconds(200))
        #expect((0..<4).allSatisfy { h.only($0) == .binaryAccepted })
    }

    @Test func aCloseAfterTheErrorResponseReplaysNothingTwice() {
        var h = Harness()
        h.connect()
        h.submit(0..<3)
        h.error(8, naming: h.identifier(of: 0))
        h.close()
        #expect(h.machine.queuedCount == 2)
        h.connect()
        #expect(h.written.map(\.request) == [1, 2])
    }

    @Test func aFullBufferMakesRequestsWait() {
        var h = Harness(capacity: 3)
        h.connect()
        h.submit(0..<5)
        #expect(h.written.map(\.request) == [0, 1, 2])
        #expect(h.machine.heldCount == 3)
        #expect(h.machine.queuedCount == 2)
        h.advance(.milliseconds(200))
        #expect((0..<3).allSatisfy { h.only($0) == .binaryAccepted })
        #expect(h.written.map(\.request) == [0, 1, 2, 3, 4])
        #expect(h.machine.queuedCount == 0)
        h.advance(.milliseconds(200))
        #expect((0..<5).allSatisfy { h.only($0) == .binaryAccepted })
    }

    @Test func replaysGoBeforeWaitingRequests() {
        var h = Harness(capacity: 2)
        h.connect()
        h.submit(0..<4)
        h.error(8, naming: h.identifier(of: 0))
        h.close()
        h.connect()
        #expect(h.written.map(\.request) == [1, 2])
        #expect(h.written.map(\.replay) == [true, false])
    }

    @Test func identifiersWrapAroundSkippingZero() {
        var h = Harness(firstIdentifier: UInt32.max - 1)
        h.connect()
        h.submit(0..<4)
        #expect(h.written.map(\.identifier) == [UInt32.max - 1, UInt32.max, 1, 2])
        h.error(8, naming: 1)
        #expect(h.only(0) == .binaryAccepted)
        #expect(h.only(1) == .binaryAccepted)
        #expect(h.only(2) == .binaryRejected(status: 8))
        h.close()
        h.connect()
        #expect(h.written.map { ($0.identifier, $0.request) }.elementsEqual([(3, 3)], by: ==))
    }

    /// An identifier the buffer does not hold (its frame already counted as delivered, or noise):
    /// Apple discarded everything after it, so everything held is written again.
    @Test func anUnknownIdentifierReplaysEverythingHeld() {
        var h = Harness()
        h.connect()
        h.submit(0..<3)
        h.error(8, naming: 999)
        #expect(h.unmatched == [BinaryErrorResponse(status: .invalidToken, identifier: 999)])
        #expect(h.results.isEmpty)
        h.close()
        h.connect()
        #expect(h.written.map(\.request) == [0, 1, 2])
    }

    @Test func aSecondErrorResponseOnTheSameConnectionIsIgnored() {
        var h = Harness()
        h.connect()
        h.submit(0..<3)
        h.error(8, naming: h.identifier(of: 1))
        h.error(8, naming: h.identifier(of: 2))
        #expect(h.results[2] == nil)
        #expect(h.machine.queuedCount == 1)
    }

    @Test func shutdownFailsUnwrittenRequestsAndLetsHeldOnesSettle() {
        var h = Harness(capacity: 2)
        h.connect()
        h.submit(0..<4)
        h.apply(h.machine.beginShutdown())
        #expect(h.only(2) == .failed(.shutdown))
        #expect(h.only(3) == .failed(.shutdown))
        #expect(!h.closeRequested)
        h.submit([4])
        #expect(h.only(4) == .failed(.shutdown))
        h.advance(.milliseconds(200))
        #expect(h.only(0) == .binaryAccepted)
        #expect(h.only(1) == .binaryAccepted)
        #expect(h.closeRequested)
    }

    @Test func aCloseDuringShutdownFailsHeldFramesAsLost() {
        var h = Harness()
        h.connect()
        h.submit(0..<2)
        h.apply(h.machine.beginShutdown())
        h.close()
        #expect(h.only(0) == .failed(.connectionLost("test")))
        #expect(h.only(1) == .failed(.connectionLost("test")))
    }

    @Test func connectFailuresGiveUpOnRequestsThatWaitedTooLong() {
        var h = Harness()
        h.submit([0])
        h.now += .seconds(3)
        h.submit([1])
        h.apply(h.machine.connectFailed(reason: "refused", now: h.now))
        #expect(h.results.isEmpty)
        h.now += .seconds(2)
        h.apply(h.machine.connectFailed(reason: "refused", now: h.now))
        #expect(h.only(0) == .failed(.connectFailed("refused")))
        #expect(h.results[1] == nil)
        h.connect()
        #expect(h.written.map(\.request) == [1])
    }

    /// A frame that keeps being replayed on connections that fail (a refused certificate shows
    /// up like that under TLS 1.3) still gives up once it has waited `maxQueueWait` in all.
    @Test func replaysKeepTheirFirstQueueTimeForGivingUp() {
        var h = Harness()
        h.submit([0])
        for _ in 0..<3 {
            h.connect()
            #expect(h.written.map(\.request) == [0])
            h.now += .seconds(2)
            h.close()
            h.apply(h.machine.connectFailed(reason: "refused", now: h.now))
        }
        #expect(h.only(0) == .failed(.connectFailed("refused")))
        #expect(h.machine.queuedCount == 0)
    }

    // MARK: randomized

    /// Apple's gateway as the protocol describes it: frames arrive in order and are processed
    /// one by one; the first bad frame gets an error response, then the connection is closed
    /// and every frame after it discarded; a shutdown names the last frame processed; a silent
    /// close loses whatever was not processed yet.
    @Test(arguments: 0..<200)
    func randomSequencesDeliverEachGoodJobOnceAndSettleEveryBadOne(seed: Int) {
        var rng = SeededGenerator(seed: UInt64(seed) &* 7919 &+ 1)
        let jobCount = Int.random(in: 1...60, using: &rng)
        let badStatus: [Int: UInt8] = Dictionary(
            uniqueKeysWithValues: (0..<jobCount).compactMap { job -> (Int, UInt8)? in
                guard Int.random(in: 0..<5, using: &rng) == 0 else { return nil }
                return (job, [8, 8, 8, 1, 7, 255].randomElement(using: &rng)!)
            })
        var h = Harness(
            capacity: Int.random(in: 1...8, using: &rng), holdWindow: .milliseconds(100),
            firstIdentifier: Bool.random(using: &rng) ? 1 : UInt32.max - UInt32.random(in: 0...20, using: &rng))

        var appleDelivered: [Int: Int] = [:]
        /// Jobs Apple processed while we still held them when a connection dropped silently:
        /// those are written again, so the protocol itself can deliver them twice.
        var mayRepeat: Set<Int> = []
        var pipe: [(identifier: UInt32, request: Int)] = []  // written, not yet read by Apple
        var readCount = 0  // frames of `h.written` Apple has taken off the pipe
        var lastGood: UInt32?
        var pendingError: BinaryErrorResponse?
        var appleClosed = false
        var connected = false
        var processedOnConnection: [Int] = []

        func syncPipe() {
            while readCount < h.written.count {
                pipe.append((h.written[readCount].identifier, h.written[readCount].request))
                readCount += 1
            }
        }
        func appleReads(_ n: Int) {
            syncPipe()
            for _ in 0..<n {
                guard !appleClosed, pendingError == nil, !pipe.isEmpty else { return }
                let frame = pipe.removeFirst()
                if let status = badStatus[frame.request] {
                    pendingError = BinaryErrorResponse(status: BinaryStatus(rawValue: status), identifier: frame.identifier)
                } else {
                    appleDelivered[frame.request, default: 0] += 1
                    processedOnConnection.append(frame.request)
                    lastGood = frame.identifier
                }
            }
        }
        func connect() {
            h.connect()
            connected = true
            pipe = []
            readCount = 0
            lastGood = nil
            pendingError = nil
            appleClosed = false
            processedOnConnection = []
            syncPipe()
        }
        func closeConnection() {
            pipe = []
            h.close()
            connected = false
        }
        func deliverErrorAndClose() {
            guard let error = pendingError else { return }
            h.apply(h.machine.errorResponse(error, now: h.now))
            closeConnection()
        }
        /// Apple catches up with everything written (the hold window is longer than the
        /// round trip), then the clock moves on.
        func settleAndAdvance(_ duration: Duration) {
            if connected {
                appleReads(Int.max)
                deliverErrorAndClose()
            }
            h.advance(duration)
        }

        var nextJob = 0
        var steps = 0
        while h.results.count < jobCount {
            steps += 1
            #expect(steps < 100_000, "no progress")
            if steps >= 100_000 { return }
            if !connected {
                if nextJob < jobCount && Bool.random(using: &rng) {
                    h.submit([nextJob])
                    nextJob += 1
                } else {
                    connect()
                }
                continue
            }
            switch Int.random(in: 0..<10, using: &rng) {
            case 0...3 where nextJob < jobCount:
                h.submit([nextJob])
                nextJob += 1
                syncPipe()
            case 4, 5:
                appleReads(Int.random(in: 1...4, using: &rng))
            case 6:
                deliverErrorAndClose()
            case 7 where pendingError == nil && Int.random(in: 0..<4, using: &rng) == 0:
                // Close without an error packet: unread frames are lost, and frames Apple
                // processed that we still hold will be written again.
                syncPipe()
                let held = Set(h.machine.heldIdentifiers)
                for frame in h.written where held.contains(frame.identifier) && processedOnConnection.contains(frame.request) {
                    mayRepeat.insert(frame.request)
                }
                appleClosed = true
                closeConnection()
            case 8 where pendingError == nil && lastGood != nil && Int.random(in: 0..<4, using: &rng) == 0:
                // Shutdown: the last good frame is named, everything after it discarded.
                appleClosed = true
                pendingError = BinaryErrorResponse(status: .shutdown, identifier: lastGood!)
                deliverErrorAndClose()
            default:
                settleAndAdvance(.milliseconds(Int64.random(in: 20...120, using: &rng)))
            }
        }

        #expect(Set(h.allIdentifiers).count == h.allIdentifiers.count, "an identifier was reused (seed \(seed))")
        for job in 0..<jobCount {
            let results = h.results[job] ?? []
            #expect(results.count == 1, "job \(job) settled \(results.count) times (seed \(seed))")
            if let status = badStatus[job] {
                #expect(results.first == .binaryRejected(status: status), "bad job \(job) (seed \(seed))")
                #expect(appleDelivered[job] == nil)
            } else {
                #expect(results.first == .binaryAccepted, "good job \(job) (seed \(seed))")
                let delivered = appleDelivered[job] ?? 0
                if mayRepeat.contains(job) {
                    #expect(delivered >= 1, "good job \(job) lost (seed \(seed))")
                } else {
                    #expect(delivered == 1, "good job \(job) delivered \(delivered) times (seed \(seed))")
                }
            }
        }
    }
}
