import Testing

// Replaced by the real suite of this target.
@Test func APNSWorkerTestsBuilds() { #expect(Bool(true)) }
