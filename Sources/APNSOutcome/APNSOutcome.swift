/// APNSOutcome: where a job ends (contract §4). `OutcomeClassifier` maps what a transport learned
/// (`TransportResult`: an HTTP/2 answer, a binary status, or no answer) to an `Outcome` that the
/// worker carries out. Above `APNSBinaryProtocol` because the binary API's status codes are part
/// of what it classifies.
public enum APNSOutcomeModule {}
