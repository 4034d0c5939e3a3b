/// APNSJSON: JSON as the worker reads and writes it, with no IO and no Foundation parser.
///
/// `JSONReader` is the strict reader of message bodies (bounded depth, UTF-8 checked with an
/// offset, duplicate keys refused, exact integers, where each top-level value lies in the body);
/// `JSONSkim` reads a job's payload without building it and must agree with the reader on every
/// input (the tests and the job parser's fuzz target hold them to it); `JSONValue` is the value
/// both produce; `FlatJSON` writes the small flat objects the worker makes itself. The readers'
/// entry points are `package`: only the parsers of this package (`JobParser`, `GroupJobParser`)
/// call them.
public enum APNSJSONModule {}
