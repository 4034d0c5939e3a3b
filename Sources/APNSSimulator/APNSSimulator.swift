/// APNSSimulator: a local APNs that behaves like Apple (TLS + HTTP/2 and the binary gateway),
/// with scripted outcomes and fault injection, for tests, benchmarks and the local run.
public enum APNSSimulatorModule {}
