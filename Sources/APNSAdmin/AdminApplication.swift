/// The admin server's Hummingbird application, with a `run()` of its own in place of
/// Hummingbird's (`ApplicationProtocol.run()`), because that one starts a `DateCache` which
/// formats the `Date` header with Foundation's `Calendar` and `TimeZone.gmt`. On Linux those are
/// ICU's once FoundationInternationalization is loaded, so the cache's first date faulted ICU's
/// code and time-zone data into every worker at start-up: with the fleet's `.iso8601` dates, the
/// other caller, 2–3 MiB of the worker's peak resident memory (docs/benchmarks.md, "The ICU pair
/// taken out"). This `run()` does what Hummingbird's does (2.28: the responder, a request context
/// and logger with a request ID per request, a bare 500 for an error the router did not turn into
/// a response, the `Date` and `Server` headers, HummingbirdCore's server, whose graceful shutdown
/// follows the service group's), with the `Date` header from `HTTPDate`, made per response: about
/// a microsecond, where a cache costs a timer waking the process every second for an admin port
/// that serves a few requests a minute. HummingbirdTesting's router tests use `responder`, as
/// for any application.
import APNSModel
import Foundation
import Hummingbird
import HummingbirdCore
import Logging
import NIOCore
import NIOHTTP1
import ServiceLifecycle

struct AdminApplication<Responder: HTTPResponder>: ApplicationProtocol
where Responder.Context: InitializableFromSource<ApplicationRequestContextSource> {
    let responder: Responder
    let server: HTTPServerBuilder
    let configuration: ApplicationConfiguration
    let logger: Logger
    let serverRunning: @Sendable (any Channel) async -> Void

    @Sendable func onServerRunning(_ channel: any Channel) async {
        await serverRunning(channel)
    }

    /// A parse error met while writing the response: thrown as this, not as itself, because
    /// HummingbirdCore answers an `HTTPParserError` with a 400 on a response already begun.
    struct ParseErrorWhileWritingResponse: Error {}

    func run() async throws {
        let responder = self.responder
        let logger = self.logger
        let serverName = configuration.serverName
        let server = try self.server.buildServer(
            configuration: ServerConfiguration(
                address: configuration.address, serverName: serverName, backlog: configuration.backlog,
                reuseAddress: configuration.reuseAddress, availableConnectionsDelegate: configuration.availableConnectionsDelegate),
            eventLoopGroup: eventLoopGroup, logger: logger
        ) { (request, responseWriter: consuming ResponseWriter, channel) in
            var requestLogger = logger
            requestLogger[metadataKey: "hb.request.id"] = .stringConvertible(RequestID())
            let response = try await withLogger(requestLogger) { logger in
                var response: Response
                do {
                    response = try await responder.respond(
                        to: request, context: Responder.Context(source: ApplicationRequestContextSource(channel: channel, logger: logger)))
                } catch let error as HTTPParserError {
                    throw error
                } catch {
                    logger.debug("Unrecognised Error", metadata: ["error.type": "\(error)"])
                    response = Response(status: .internalServerError, body: .init())
                }
                response.headers[.date] = HTTPDate.string(from: Date())
                if let serverName { response.headers[.server] = serverName }
                return response
            }
            do {
                try await responseWriter.write(response: response.head, body: response.body)
            } catch is HTTPParserError {
                throw ParseErrorWhileWritingResponse()
            }
        } onServerRunning: { channel in
            await self.onServerRunning(channel)
        }
        try await server.run()
    }
}
