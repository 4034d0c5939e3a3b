// Names the client sends as AMQP short strings, refused before they reach the connection.

extension AMQPShortString {
    /// A short string's bound (AMQP 0-9-1: one length byte): the one definition of it, for the
    /// names the client sends, the keys and values it cuts, and code that builds a name from
    /// outside input (a bundle filter) and must tell, before asking the broker, that no queue
    /// can have it.
    public static let maxBytes = 255

    /// Whether `string` fits a short string: a queue, exchange, routing key or consumer tag.
    public static func fits(_ string: String) -> Bool { string.utf8.count <= maxBytes }
}

/// Queue and exchange names, routing keys and consumer tags travel as AMQP short strings: one
/// length byte, so at most 255 bytes. librabbitmq does not check: it fails to encode the method,
/// and the connection is dropped with "invalid AMQP data", taking every consumer and publish in
/// flight on it along. A name built from something a publisher sent (a forged bundle key of a
/// fleet heartbeat made a pause marker's name 273 bytes) would stop the whole connection, so a
/// command that carries one fails alone, before it is queued, with `invalidName`.
enum ShortStringNames {
    /// The first name of `names` longer than a short string allows, if any.
    static func overlong(_ names: String...) -> String? { overlong(names) }

    static func overlong(_ names: [String]) -> String? { names.first { !AMQPShortString.fits($0) } }

    static func refusal(_ name: String) -> AMQPError {
        AMQPError(
            .invalidName, "a queue, exchange, routing key or consumer tag of \(name.utf8.count) bytes: AMQP allows at most \(AMQPShortString.maxBytes)",
            queue: String(name.prefix(64)))
    }
}

extension RPCRequest {
    /// The first name this request would send that no short string can hold.
    var overlongName: String? {
        switch self {
        case .declarePlan(let plan):
            ShortStringNames.overlong(
                plan.exchanges.map(\.name) + plan.queues.map(\.name) + plan.bindings.flatMap { [$0.queue, $0.exchange, $0.routingKey] })
        case .declareExchange(let exchange): ShortStringNames.overlong(exchange.name)
        case .declareQueue(let queue): ShortStringNames.overlong(queue.name)
        case .bind(let binding): ShortStringNames.overlong(binding.queue, binding.exchange, binding.routingKey)
        case .deleteQueue(let name, _, _), .deleteExchange(let name, _), .purgeQueue(let name), .inspectQueue(let name), .get(let name, _, _):
            ShortStringNames.overlong(name)
        }
    }
}
