// The tests' polling deadline (TestSupport's `PollBudget`): a stall of the process does not spend
// it, polling that sees nothing does.
import Testing
import TestSupport

@Suite struct PollBudgetTests {
    let start = ContinuousClock.now

    @Test func roundsOnTimeSpendTheBudgetInTheTimeoutsWallTime() {
        var budget = PollBudget(.seconds(2), every: .milliseconds(100), from: start)
        for round in 1...19 {
            let spent = budget.spent(at: start + .milliseconds(100 * round))
            #expect(!spent, "round \(round)")
        }
        let spent = budget.spent(at: start + .seconds(2))
        #expect(spent)
    }

    /// A minute in which the process did not run counts as one round's most (the interval and a
    /// second), so the polls after it still get their time to see the condition.
    @Test func aStallCountsAsOneLateRound() {
        var budget = PollBudget(.seconds(60), every: .milliseconds(100), from: start)
        let spentByTheStall = budget.spent(at: start + .seconds(61))
        #expect(!spentByTheStall)
        var now = start + .seconds(61)
        var rounds = 0
        repeat {
            now += .milliseconds(100)
            rounds += 1
        } while !budget.spent(at: now)
        // 60 s less the 1.1 s the stall counted, in rounds of 100 ms.
        #expect(rounds == 589)
    }

    /// Rounds slower than the cap (a condition that takes seconds to answer) still end the wait.
    @Test func slowRoundsStillEndIt() {
        var budget = PollBudget(.seconds(10), every: .milliseconds(100), from: start)
        var rounds = 0
        var now = start
        repeat {
            now += .seconds(5)
            rounds += 1
        } while !budget.spent(at: now)
        #expect(rounds == 10)  // 1.1 s a round: ten of them pass 10 s
    }
}
