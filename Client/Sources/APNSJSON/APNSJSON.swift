/// APNSJSON: JSON as the worker reads and writes it, with no IO and no Foundation parser.
///
/// `JSONReader` is the strict reader of message bodies (bounded depth, UTF-8 checked with an
/// offset, duplicate keys refused, exact integers, where each top-level value lies in the body);
/// `JSONSkim` reads a job's payload without building it and must agree with the reader on every
/// input (the tests and the job parser's fuzz target hold them to it); `JSONValue` is the value
/// both produce; `FlatJSON` writes the small flat objects the worker makes itself. The readers'
/// entry points are SPI (`@_spi(APNSWorker)`): the parsers of the client's package (`JobParser`,
/// `GroupJobParser`) and the worker's own modules call them; a sync server that imports this
/// module without the SPI sees none of them.
public enum APNSJSONModule {}
