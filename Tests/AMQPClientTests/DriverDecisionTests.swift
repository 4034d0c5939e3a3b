import Testing

@testable import AMQPClient

/// The decisions of the connection's owner thread, without a broker: publisher confirms, the
/// channel table and the reconnect policy. What the broker does with them is tested against
/// RabbitMQ (`MessagingTests`, `RecoveryTests`).
@Suite struct PublishConfirmsTests {
    typealias Confirms = PublishConfirms<String>

    /// What each settled publish got: "ok", or its error's code.
    static func settle(_ confirms: inout Confirms, upTo tag: UInt64, multiple: Bool, ack: Bool = true) -> [String: String] {
        var settled: [String: String] = [:]
        confirms.confirmed(upTo: tag, multiple: multiple, ack: ack) { waiter, error in settled[waiter] = error.map { "\($0.code)" } ?? "ok" }
        return settled
    }

    @Test func publishesAreNumberedFromOneAndAgainOnANewChannel() {
        var confirms = Confirms()
        #expect(confirms.sent("a", returnKey: nil) == 1)
        #expect(confirms.sent("b", returnKey: nil) == 2)
        confirms.failAll { _ in }
        confirms.restartNumbering()
        #expect(confirms.sent("c", returnKey: nil) == 1)
    }

    @Test func aMultipleAckSettlesEverythingUpToItsTagAndASingleOneOnlyItself() {
        var confirms = Confirms()
        for name in ["a", "b", "c", "d"] { confirms.sent(name, returnKey: nil) }
        #expect(Self.settle(&confirms, upTo: 3, multiple: false) == ["c": "ok"])
        #expect(Self.settle(&confirms, upTo: 2, multiple: true) == ["a": "ok", "b": "ok"])
        #expect(Self.settle(&confirms, upTo: 4, multiple: true) == ["d": "ok"])
        #expect(confirms.count == 0)
        // A confirm for something no longer in flight settles nothing.
        #expect(Self.settle(&confirms, upTo: 4, multiple: true).isEmpty)
    }

    @Test func aNackFailsThePublishesItCovers() {
        var confirms = Confirms()
        confirms.sent("a", returnKey: nil)
        confirms.sent("b", returnKey: nil)
        #expect(Self.settle(&confirms, upTo: 2, multiple: true, ack: false) == ["a": "\(AMQPError.Code.publishNacked)", "b": "\(AMQPError.Code.publishNacked)"])
    }

    @Test func aReturnFailsTheOldestMatchingMandatoryPublishWhenItsAckComes() {
        var confirms = Confirms()
        let key = Confirms.ReturnKey(exchange: "x", routingKey: "k", body: [1])
        confirms.sent("not mandatory", returnKey: nil)
        confirms.sent("first", returnKey: key)
        confirms.sent("second", returnKey: key)
        confirms.sent("other", returnKey: .init(exchange: "x", routingKey: "k", body: [2]))
        let returned = AMQPError(.publishReturned, "returned")
        let matched = confirms.returned(key, error: returned)
        #expect(matched)
        #expect(
            Self.settle(&confirms, upTo: 4, multiple: true)
                == ["not mandatory": "ok", "first": "\(AMQPError.Code.publishReturned)", "second": "ok", "other": "ok"])
        let matchedAgain = confirms.returned(key, error: returned)
        #expect(!matchedAgain)
    }

    @Test func failingAllHandsOverEveryPublishOldestFirst() {
        var confirms = Confirms()
        for name in ["a", "b", "c"] { confirms.sent(name, returnKey: nil) }
        _ = Self.settle(&confirms, upTo: 2, multiple: false)
        var failed: [String] = []
        confirms.failAll { failed.append($0) }
        #expect(failed == ["a", "c"])
        #expect(confirms.count == 0)
        // Numbering goes on until the channel is opened again.
        #expect(confirms.sent("d", returnKey: nil) == 4)
    }
}

/// Channel generations (which delivery tags are still good) and consumer channel numbers.
@Suite struct ChannelTableTests {
    @Test func everyOpeningIsANewGenerationAndOnlyTheOpenOneIsCurrent() {
        var table = ChannelTable()
        let first = table.opened(3)
        let tag = AMQPDeliveryTag(channel: 3, generation: first, value: 1)
        #expect(table.isCurrent(tag))
        table.closed(3)
        #expect(!table.isCurrent(tag))
        let second = table.opened(3)
        #expect(second > first)
        #expect(!table.isCurrent(tag))
        #expect(table.isCurrent(AMQPDeliveryTag(channel: 3, generation: second, value: 1)))
    }

    @Test func aLostConnectionEndsEveryGenerationButNotTheNumbering() {
        var table = ChannelTable()
        let control = table.opened(ChannelTable.control)
        table.opened(ChannelTable.publish)
        table.connectionLost()
        #expect(table.generations.isEmpty)
        table.newConnection()
        #expect(table.opened(ChannelTable.control) > control)
    }

    /// A re-consume closes its old channel once its jobs are settled; the number it frees is the
    /// last one reused, and only after the frames read before the close have been handled.
    @Test func theNumberFreedLongestAgoIsReusedFirst() {
        var table = ChannelTable()
        for expected: UInt16 in [4, 5, 6, 7] { #expect(table.allocateConsumerChannel() == expected) }
        table.releaseConsumerChannel(6)
        table.releaseConsumerChannel(4)
        table.releaseConsumerChannel(7)
        table.frameQueueDrained()
        #expect(table.allocateConsumerChannel() == 6)
        #expect(table.allocateConsumerChannel() == 4)
        #expect(table.allocateConsumerChannel() == 7)
        #expect(table.allocateConsumerChannel() == 8)
    }

    /// A quorum queue sends deliveries after `basic.cancel-ok`, and librabbitmq queues those it
    /// reads during the channel's close RPC: until they are handled (and dropped, the broker
    /// requeued them at the close), the number is not given to another consumer, whose they
    /// would be taken for (ReconsumeBrokerTests under load: jobs worked twice).
    @Test func aClosedNumberWaitsForTheFrameQueueToDrainBeforeItIsReused() {
        var table = ChannelTable()
        #expect(table.allocateConsumerChannel() == 4)
        #expect(table.allocateConsumerChannel() == 5)
        table.releaseConsumerChannel(4)
        #expect(table.allocateConsumerChannel() == 6)
        table.frameQueueDrained()
        #expect(table.allocateConsumerChannel() == 4)
        #expect(table.allocateConsumerChannel() == 7)
    }

    /// A consumer released with its deliveries settled leaves its channel open as a spare, and
    /// the next consumer takes it instead of a new number: stopping and starting consumers
    /// (pauses, holds, reloads) keeps the count of channels flat, however many times.
    @Test func aReleasedConsumersChannelIsTakenByTheNextConsumerInsteadOfANewOne() {
        var table = ChannelTable()
        let first = table.allocateConsumerChannel()
        let generation = table.opened(first)
        for _ in 0..<3_000 {
            table.spare(first)
            #expect(table.takeSpare() == first)
        }
        #expect(table.generation(of: first) == generation, "the same channel, never closed: its delivery tags stay good")
        #expect(table.takeSpare() == nil)
        #expect(table.allocateConsumerChannel() == first + 1, "no number was used up meanwhile")
    }

    /// Only open consumer channels are spares, once each; one the broker closes meanwhile is
    /// no spare any more and its number is freed; a new connection has none.
    @Test func aSpareIsAnOpenConsumerChannelAndOneClosedMeanwhileIsNotTaken() {
        var table = ChannelTable()
        table.opened(ChannelTable.get)
        table.spare(ChannelTable.get)
        #expect(table.takeSpare() == nil, "the fixed channels are not consumers'")
        let (a, b) = (table.allocateConsumerChannel(), table.allocateConsumerChannel())
        table.spare(a)
        #expect(table.takeSpare() == nil, "never opened")
        table.opened(a)
        table.opened(b)
        table.spare(a)
        table.spare(a)
        table.spare(b)
        table.closed(b)
        #expect(table.takeSpare() == a)
        #expect(table.takeSpare() == nil, "b closed, a spared once")
        table.frameQueueDrained()
        #expect(table.allocateConsumerChannel() == b, "the closed spare's number is free again")
        table.spare(a)
        table.connectionLost()
        table.newConnection()
        #expect(table.takeSpare() == nil)
    }

    @Test func consumerChannelsStartAfterTheFixedOnesAndFreedNumbersAreReused() {
        var table = ChannelTable()
        #expect(Set([ChannelTable.control, ChannelTable.publish, ChannelTable.get]).count == 3)
        #expect([ChannelTable.control, ChannelTable.publish, ChannelTable.get].allSatisfy { $0 < ChannelTable.firstConsumer })
        #expect(table.allocateConsumerChannel() == 4)
        #expect(table.allocateConsumerChannel() == 5)
        #expect(table.allocateConsumerChannel() == 6)
        table.releaseConsumerChannel(5)
        table.releaseConsumerChannel(5)
        table.releaseConsumerChannel(ChannelTable.publish)
        table.releaseConsumerChannel(ChannelTable.get)
        table.frameQueueDrained()
        #expect(table.allocateConsumerChannel() == 5)
        #expect(table.allocateConsumerChannel() == 7)
        table.releaseConsumerChannel(7)
        table.newConnection()
        table.frameQueueDrained()
        #expect(table.allocateConsumerChannel() == 4)
        #expect(table.allocateConsumerChannel() == 5)
    }
}

/// The failover list, the backoff, and when `connect` gives up.
@Suite struct ReconnectPolicyTests {
    /// Jitter-free: the generator always draws the top of the range.
    struct Highest: RandomNumberGenerator {
        mutating func next() -> UInt64 { .max }
    }

    static let backoff = AMQPBackoff(initial: .milliseconds(100), maximum: .milliseconds(400))

    static let t0 = ContinuousClock.now

    @Test func beforeTheFirstConnectionItGivesUpOnceEveryURLFailed() {
        var policy = ReconnectPolicy(urlCount: 3, backoff: Self.backoff)
        var random = Highest()
        #expect(policy.urlIndex == 0)
        #expect(policy.failed(at: Self.t0, using: &random) == .retry(after: .milliseconds(100)))
        #expect(policy.urlIndex == 1)
        #expect(policy.failed(at: Self.t0, using: &random) == .retry(after: .milliseconds(200)))
        #expect(policy.urlIndex == 2)
        #expect(policy.failed(at: Self.t0, using: &random) == .giveUp)
    }

    @Test func afterAConnectionItRotatesTheListForeverWithACappedBackoff() {
        var policy = ReconnectPolicy(urlCount: 2, backoff: Self.backoff)
        var random = Highest()
        policy.established(at: Self.t0)
        var delays: [Duration] = []
        var urls: [Int] = []
        for _ in 0..<5 {
            guard case .retry(let delay) = policy.failed(at: Self.t0, using: &random) else {
                Issue.record("gave up after a connection")
                return
            }
            delays.append(delay)
            urls.append(policy.urlIndex)
        }
        #expect(delays == [100, 200, 400, 400, 400].map { .milliseconds($0) })
        #expect(urls == [1, 0, 1, 0, 1])
    }

    @Test func aConnectionThatStayedEstablishedStartsTheBackoffOver() {
        var policy = ReconnectPolicy(urlCount: 1, backoff: Self.backoff)
        var random = Highest()
        policy.established(at: Self.t0)
        _ = policy.failed(at: Self.t0, using: &random)
        _ = policy.failed(at: Self.t0, using: &random)
        policy.established(at: Self.t0)
        let later = Self.t0 + ReconnectPolicy.stableAfter
        #expect(policy.failed(at: later, using: &random) == .retry(after: .milliseconds(100)))
    }

    /// A node that takes the login and then closes the connection on every declaration (541
    /// `cluster_not_formed` on a busy node) is asked again less and less often, however many
    /// times the login succeeds.
    @Test func aConnectionLostSoonAfterItWasEstablishedKeepsBackingOff() {
        var policy = ReconnectPolicy(urlCount: 1, backoff: Self.backoff)
        var random = Highest()
        var now = Self.t0
        var delays: [Duration] = []
        for _ in 0..<4 {
            policy.established(at: now)
            now += .seconds(1)
            guard case .retry(let delay) = policy.failed(at: now, using: &random) else {
                Issue.record("gave up after a connection")
                return
            }
            delays.append(delay)
        }
        #expect(delays == [100, 200, 400, 400].map { .milliseconds($0) })
    }

    @Test func aConnectionThatFailedToRestoreStillCountsTowardsGivingUp() {
        var policy = ReconnectPolicy(urlCount: 2, backoff: Self.backoff)
        var random = Highest()
        #expect(policy.failed(at: Self.t0, using: &random) == .retry(after: .milliseconds(100)))
        #expect(policy.failed(at: Self.t0, using: &random) == .giveUp)
    }
}

/// Which passes of the owner thread hold their frames in the kernel until the pass ends.
@Suite struct CorkTests {
    @Test func aPassIsHeldOnlyWhenItPublishesTwiceAndWaitsForNoReply() {
        #expect(Command.worthCorking([2]), "a batch of two events")
        #expect(Command.worthCorking([1, 0, 1]), "two publishes and an ack")
        #expect(!Command.worthCorking([1, 0, 0]), "one publish: one push either way")
        #expect(!Command.worthCorking([0, 0]), "acks alone are coalesced into one frame")
        #expect(!Command.worthCorking([]))
        #expect(!Command.worthCorking([5, nil]), "an RPC waits for the answer to what it wrote")
        #expect(!Command.worthCorking([nil, 5]))
    }
}

/// Consumers across channels, cancellations and reconnects.
@Suite struct ConsumerRegistryTests {
    typealias Registry = ConsumerRegistry<String>

    @Test func aStartedConsumerIsFoundByItsChannelUntilTheChannelCloses() {
        var registry = Registry()
        registry.add(1, "jobs")
        #expect(registry.consumer(on: 3) == nil)
        registry.started(1, on: 3)
        #expect(registry.consumer(on: 3)?.id == 1)
        let closed = registry.channelClosed(3)
        #expect(closed?.id == 1)
        #expect(closed?.entry.channel == nil)
        #expect(registry.consumer(on: 3) == nil)
        #expect(registry.entry(1)?.request == "jobs")
    }

    @Test func aCancelledConsumerKeepsItsChannelUntilTheNextConnectionForgetsIt() {
        var registry = Registry()
        registry.add(1, "a")
        registry.add(2, "b")
        registry.started(1, on: 3)
        registry.started(2, on: 4)
        #expect(registry.cancel(1)?.channel == 3)
        #expect(registry.cancel(1) == nil)
        #expect(registry.consumer(on: 3)?.entry.cancelled == true)
        #expect(registry.liveIDs == [2])
        registry.connectionLost()
        #expect(registry.consumer(on: 4) == nil)
        #expect(registry.toRestore() == [2])
        #expect(registry.entry(1) == nil)
    }

    @Test func consumersAreRestoredInTheOrderTheyWereAskedFor() {
        var registry = Registry()
        for id in [5, 2, 9] { registry.add(id, "q\(id)") }
        #expect(registry.toRestore() == [2, 5, 9])
        #expect(registry.removeAll() == ["q2", "q5", "q9"])
        #expect(registry.entries.isEmpty)
    }

    @Test func removingAConsumerFreesItsChannel() {
        var registry = Registry()
        registry.add(1, "a")
        registry.started(1, on: 3)
        #expect(registry.remove(1) == "a")
        #expect(registry.consumer(on: 3) == nil)
        #expect(registry.channelClosed(3) == nil)
        #expect(registry.remove(1) == nil)
    }
}

/// Deliveries and returns put together from their method, header and body frames.
@Suite struct ContentAssemblerTests {
    typealias Kind = ContentAssembler.Message.Kind

    @Test func aDeliveryIsFinishedByItsLastBodyFrame() {
        var assembler = ContentAssembler()
        assembler.begin(.delivery(tag: 7, redelivered: true, consumerTag: "c"), exchange: "x", routingKey: "k", on: 3)
        var properties = AMQPProperties()
        properties.messageID = "m-1"
        #expect(assembler.header(on: 3, bodySize: 5) { properties } == nil)
        #expect(assembler.body(on: 3, [1, 2]) == nil)
        let message = assembler.body(on: 3, [3, 4, 5])
        #expect(message?.body == [1, 2, 3, 4, 5])
        #expect(message?.properties.messageID == "m-1")
        #expect(message?.kind == .delivery(tag: 7, redelivered: true, consumerTag: "c"))
        #expect(message?.exchange == "x")
        #expect(!assembler.isAssembling(on: 3))
    }

    @Test func anEmptyBodyIsFinishedByTheHeader() {
        var assembler = ContentAssembler()
        assembler.begin(.returned(replyCode: 312, replyText: "NO_ROUTE"), exchange: "x", routingKey: "k", on: 2)
        let message = assembler.header(on: 2, bodySize: 0) { nil }
        #expect(message?.kind == .returned(replyCode: 312, replyText: "NO_ROUTE"))
        #expect(message?.body == [])
    }

    @Test func channelsAreAssembledApartAndFramesOfNothingAreIgnored() {
        var assembler = ContentAssembler()
        var decoded = 0
        #expect(assembler.header(on: 4, bodySize: 1) { decoded += 1; return nil } == nil)
        #expect(decoded == 0)
        #expect(assembler.body(on: 4, [9]) == nil)
        assembler.begin(.delivery(tag: 1, redelivered: false, consumerTag: "a"), exchange: "", routingKey: "a", on: 3)
        assembler.begin(.delivery(tag: 1, redelivered: false, consumerTag: "b"), exchange: "", routingKey: "b", on: 4)
        _ = assembler.header(on: 3, bodySize: 1) { nil }
        _ = assembler.header(on: 4, bodySize: 1) { nil }
        #expect(assembler.body(on: 4, [4])?.routingKey == "b")
        #expect(assembler.body(on: 3, [3])?.routingKey == "a")
    }

    @Test func aClosedChannelDropsItsHalfMessage() {
        var assembler = ContentAssembler()
        assembler.begin(.delivery(tag: 1, redelivered: false, consumerTag: "a"), exchange: "", routingKey: "a", on: 3)
        _ = assembler.header(on: 3, bodySize: 2) { nil }
        assembler.discard(channel: 3)
        #expect(assembler.body(on: 3, [1, 2]) == nil)
        assembler.begin(.delivery(tag: 2, redelivered: false, consumerTag: "a"), exchange: "", routingKey: "a", on: 3)
        assembler.discardAll()
        #expect(!assembler.isAssembling(on: 3))
    }
}

/// What a re-consume (`consume(replacing:…)`) starts with: its caller's settings, the cutting
/// of bodies of the consumer it replaces.
@Suite struct ReplacementSettingsTests {
    static func request(
        id: Int, maxBodySize: Int, deadLetterQueue: String?, cutsBodies: Bool = false, replacing: Int? = nil
    ) -> ConsumerRequest {
        var route: AMQPOversizedDeadLetter?
        if let deadLetterQueue {
            route = { properties, _ in AMQPOutboundMessage(exchange: "", routingKey: deadLetterQueue, body: [], properties: properties) }
        }
        return ConsumerRequest(
            id: id, queue: "jobs", prefetch: 10, maxBodySize: maxBodySize, oversizedDeadLetter: route, tag: "t\(id)",
            buffer: DeliveryBuffer(), cutsBodies: cutsBodies, replacing: replacing)
    }

    /// Where `request` copies an oversized body, if anywhere.
    static func deadLetterQueue(_ request: ConsumerRequest) -> String? {
        request.oversizedDeadLetter?(AMQPProperties(), 1).routingKey
    }

    @Test func theBodyLimitAndTheDeadLetterRouteAreTheCallersNotTheReplacedConsumers() {
        let old = Self.request(id: 1, maxBodySize: 8, deadLetterQueue: "old.dead")
        let asked = Self.request(id: 2, maxBodySize: 64 * 1024, deadLetterQueue: "new.dead", replacing: 1)
        let started = ConnectionDriver.replacementSettings(asked, replacing: old)
        #expect(started.maxBodySize == 64 * 1024)
        #expect(Self.deadLetterQueue(started) == "new.dead")
        // A route taken away is gone too, and one given where old had none is kept.
        let withoutRoute = ConnectionDriver.replacementSettings(Self.request(id: 3, maxBodySize: 8, deadLetterQueue: nil, replacing: 1), replacing: old)
        #expect(Self.deadLetterQueue(withoutRoute) == nil)
        let noRouteBefore = Self.request(id: 4, maxBodySize: 8, deadLetterQueue: nil)
        let withRoute = ConnectionDriver.replacementSettings(asked, replacing: noRouteBefore)
        #expect(Self.deadLetterQueue(withRoute) == "new.dead")
        #expect(started.id == 2 && started.tag == "t2" && started.prefetch == 10)
    }

    @Test func aConsumerThatCutBodiesIsReplacedByOneThatCutsThem() {
        let cutting = Self.request(id: 1, maxBodySize: 4096, deadLetterQueue: nil, cutsBodies: true)
        let asked = Self.request(id: 2, maxBodySize: 1024, deadLetterQueue: nil, replacing: 1)
        let started = ConnectionDriver.replacementSettings(asked, replacing: cutting)
        #expect(started.cutsBodies && started.maxBodySize == 1024)
        #expect(!ConnectionDriver.replacementSettings(asked, replacing: Self.request(id: 3, maxBodySize: 4096, deadLetterQueue: nil)).cutsBodies)
        // The replaced consumer no longer known (the broker cancelled it): as asked.
        let alone = ConnectionDriver.replacementSettings(asked, replacing: nil)
        #expect(!alone.cutsBodies && alone.maxBodySize == 1024)
    }
}

/// Where a `basic.deliver` goes by its consumer tag (`DeliveryRoute`): the broker delivers for
/// tags we replaced or cancelled, and must not get a tag we never had worked or lost.
@Suite struct DeliveryRouteTests {
    static func route(_ tag: String, open: Bool = true, consumer: (tag: String, cancelled: Bool)?) -> DeliveryRoute {
        DeliveryRoute.of(consumerTag: tag, channelOpen: open, consumer: consumer)
    }

    @Test func aDeliveryForTheChannelsConsumerIsWorked() {
        #expect(Self.route("apnsw-new-2", consumer: ("apnsw-new-2", false)) == .consumer)
    }

    /// `retire` left the channel to the replacing consumer: what still comes for the old tag
    /// goes back to the queue, unworked.
    @Test func aDeliveryForTheReplacedTagOnTheSameChannelGoesBackToTheQueue() {
        #expect(Self.route("apnsw-old-1", consumer: ("apnsw-new-2", false)) == .requeue)
    }

    /// A tag this channel never had (nor any of ours): back to the queue, neither worked nor
    /// left unacked for the connection's life. Near misses of the consumer's tag included.
    @Test func aDeliveryForATagWeNeverHadGoesBackToTheQueue() {
        for forged in ["", "apnsw-new-", "apnsw-new-2 ", "APNSW-NEW-2", "apnsw-new-2\u{0}", String(repeating: "x", count: 255), "é"] {
            #expect(Self.route(forged, consumer: ("apnsw-new-2", false)) == .requeue, "\(forged.debugDescription)")
        }
    }

    @Test func aDeliveryOnAnOpenChannelWithoutAConsumerGoesBackToTheQueue() {
        #expect(Self.route("apnsw-new-2", consumer: nil) == .requeue)
    }

    @Test func aDeliveryForACancelledConsumerGoesBackToTheQueue() {
        #expect(Self.route("apnsw-new-2", consumer: ("apnsw-new-2", true)) == .requeue)
    }

    /// Read after its channel closed: the broker requeued it with the close, and a reject on a
    /// channel not open would close the connection.
    @Test func aDeliveryOnAClosedChannelIsLeftToTheBroker() {
        #expect(Self.route("apnsw-new-2", open: false, consumer: ("apnsw-new-2", false)) == .drop)
        #expect(Self.route("apnsw-old-1", open: false, consumer: nil) == .drop)
    }
}
