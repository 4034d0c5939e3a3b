import APNSSoak
import Testing

@Suite struct SoakScheduleTests {
    let schedule = SoakSchedule(duration: .seconds(180), cycle: .seconds(30), restartEvery: 3, warmUpCycles: 1)

    @Test func eachNormalCycleUndoesWhatItDoesBeforeItsQuietPart() {
        let normal = schedule.events.filter { $0.cycle == 0 }
        #expect(normal.map(\.action) == SoakSchedule.normalCycle.map(\.action))
        var on: Set<SoakAction> = []
        let undo: [SoakAction: SoakAction] = [.allowKey: .refuseKey, .allowTopic: .refuseTopic, .resume: .pause, .healAPNs: .goaway]
        for event in normal {
            #expect(event.at < .seconds(30) * SoakSchedule.quietFrom)
            if let started = undo[event.action] { #expect(on.remove(started) != nil) } else if event.action != .reload, event.action != .dropConnections {
                on.insert(event.action)
            }
        }
        #expect(on.isEmpty)
        // Reloads come in pairs: every quiet part runs the configuration the run started with.
        let reloads = normal.filter { $0.action == .reload }.count
        #expect(reloads == 2)
        #expect(SoakSchedule.configuration(afterReloads: reloads).spareConfigured)
        #expect(SoakSchedule.configuration(afterReloads: reloads).rotatedKeyIndex == 0)
    }

    @Test func everyThirdCycleRestartsTheBrokerWhileTheKeyIsRefused() {
        let restarts = schedule.events.filter { $0.action == .stopBroker }.map(\.cycle)
        #expect(restarts == [2, 5])
        let cycle2 = schedule.events.filter { $0.cycle == 2 }.map(\.action)
        #expect(cycle2 == [.refuseKey, .stopBroker, .startBroker, .allowKey])
        #expect(schedule.events.filter { $0.cycle == 2 }.allSatisfy { $0.at >= .seconds(60) && $0.at < .seconds(90) })
    }

    @Test func onlyQuietPartsOfNormalCyclesAfterTheWarmUpAreJudged() {
        #expect(!schedule.isJudged(at: .seconds(25)))  // warm-up
        #expect(!schedule.isJudged(at: .seconds(32)))  // events of cycle 1
        #expect(schedule.isJudged(at: .seconds(50)))  // quiet part of cycle 1
        #expect(!schedule.isJudged(at: .seconds(80)))  // restart cycle
        #expect(schedule.isJudged(at: .seconds(170)) == false)  // cycle 5 restarts
        #expect(schedule.isJudged(at: .seconds(140)))
        #expect(!schedule.isJudged(at: .seconds(200)))  // after the run
        #expect(schedule.phase(at: .seconds(10)) == "warm-up")
        #expect(schedule.phase(at: .seconds(80)) == "restart")
        #expect(schedule.phase(at: .seconds(100)) == "events")
        #expect(schedule.phase(at: .seconds(115)) == "quiet")
    }

    @Test func epochsChangeAtEachRestartCycle() {
        #expect(schedule.epoch(at: .seconds(50)) == 0)
        #expect(schedule.epoch(at: .seconds(95)) == 1)
        #expect(schedule.epoch(at: .seconds(175)) == 1)
        #expect(SoakSchedule(duration: .seconds(60), cycle: .seconds(30), restartEvery: 0, warmUpCycles: 0).epoch(at: .seconds(59)) == 0)
    }

    @Test func noRestartsWhenRestartEveryIsZeroAndACutCycleKeepsItsEarlyEvents() {
        let cut = SoakSchedule(duration: .seconds(36), cycle: .seconds(30), restartEvery: 0, warmUpCycles: 0)
        #expect(!cut.events.contains { $0.action == .stopBroker })
        #expect(cut.events.last!.at < .seconds(36))
        #expect(cut.events.filter { $0.cycle == 1 }.map(\.action) == [.refuseKey, .allowKey, .refuseTopic])
    }

    @Test func reloadsAlternateTheSpareBundleAndTheRotatedKey() {
        let states = (0..<4).map { SoakSchedule.configuration(afterReloads: $0) }
        #expect(states.map(\.spareConfigured) == [true, false, true, false])
        #expect(states.map(\.rotatedKeyIndex) == [0, 1, 0, 1])
    }

    @Test func durationsParse() {
        #expect(SoakDuration.parse("90s") == .seconds(90))
        #expect(SoakDuration.parse("5m") == .seconds(300))
        #expect(SoakDuration.parse("1h30m") == .seconds(5400))
        #expect(SoakDuration.parse("250ms") == .milliseconds(250))
        for bad in ["", "5", "m", "5x", "1h30", "-5m"] { #expect(SoakDuration.parse(bad) == nil, "\(bad)") }
    }
}
