import Testing

// Replaced by the real suite of this target.
@Test func AMQPClientTestsBuilds() { #expect(Bool(true)) }
