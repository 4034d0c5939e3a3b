import Testing

// Replaced by the real suite of this target.
@Test func APNSCoreTestsBuilds() { #expect(Bool(true)) }
