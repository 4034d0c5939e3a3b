import AMQPClient
import APNSOperations
import Testing

/// Which failures of an operator's queue operation are a broker outage (pure; the admin answers
/// 503 for those only, `AdminQueueFailureTests` on the real broker).
@Suite struct OperationFailureTests {
    @Test(arguments: [
        AMQPError.Code.connectionFailed, .connectionLost, .notConnected, .closed, .connectionClosedByServer, .publishNacked,
        .consumerCancelled, .library,
    ])
    func aBrokerThatCannotBeReachedIsUnavailable(code: AMQPError.Code) {
        #expect(OperationFailure(AMQPError(code, "x")) == .brokerUnavailable)
    }

    @Test func aBrokerThatAnsweredIsNoOutage() {
        #expect(OperationFailure(AMQPError(.publishReturned, "x", replyCode: 312, replyText: "NO_ROUTE")) == .noWorkQueue)
        #expect(OperationFailure(AMQPError(.channelClosed, "x", replyCode: 405, replyText: "RESOURCE_LOCKED")) == .brokerRefused)
        #expect(OperationFailure(AMQPError(.channelClosed, "x", replyCode: 403, replyText: "ACCESS_REFUSED")) == .brokerRefused)
        #expect(OperationFailure(AMQPError(.declarationConflict, "x", replyCode: 406)) == .brokerRefused)
        #expect(OperationFailure(AMQPError(.invalidName, "x")) == .invalidName)
    }

    @Test func anErrorThatIsNotTheBrokersIsUnexpected() {
        struct Fault: Error {}
        #expect(OperationFailure(Fault()) == .unexpected)
        #expect(OperationFailure(AMQPError(.invalidURL, "x")) == .unexpected)
    }
}
