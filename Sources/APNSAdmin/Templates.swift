/// The Mustache templates of the admin HTML page, kept as string constants so the executable
/// needs no resource files. Every value is inserted with `{{ }}`, which HTML-escapes it; the
/// templates never use the unescaped `{{{ }}}` or `{{& }}` forms, because job bodies, reasons
/// and errors come from outside (the sync server, Apple) and must not become markup.
import Mustache

enum Templates {
    /// The status page: the per-bundle table and the dead-job list with a requeue button each.
    /// The two tables' header colours are distinctive on purpose: the headless-browser test
    /// finds them in a screenshot.
    static let statusPage = """
        <!DOCTYPE html>
        <html lang="en">
        <head>
        <meta charset="utf-8">
        <title>apns-worker admin</title>
        <style>
          body { font-family: sans-serif; margin: 16px; color: #222; background: #fff; }
          table { border-collapse: collapse; margin-bottom: 24px; }
          th, td { border: 1px solid #bbb; padding: 4px 8px; text-align: left; vertical-align: top; }
          #bundles th { background: rgb(0, 102, 204); color: #fff; }
          #dead-jobs th { background: rgb(204, 51, 0); color: #fff; }
          .held { color: rgb(204, 0, 0); font-weight: bold; }
          .body { font-family: monospace; min-width: 320px; max-width: 480px; word-break: break-all; }
          .notice { padding: 6px; background: #fff3cd; }
        </style>
        </head>
        <body>
        <h1>apns-worker</h1>
        <p>Broker: <span id="broker-state">{{broker}}</span> · Ready: <span id="ready">{{ready}}</span> · Generated {{generatedAt}}</p>
        {{#queueError}}<p class="notice" id="queue-error">Queue depths and dead jobs unavailable: {{queueError}}</p>{{/queueError}}
        <h2>Bundles</h2>
        <table id="bundles">
        <tr><th>bundle</th><th>held</th><th>delivered</th><th>invalid token</th><th>retried</th><th>dead</th>
        <th>delivered/min</th><th>retried/min</th><th>dead/min</th><th>in flight</th><th>connections</th>
        <th>work</th><th>retry</th><th>dead queue</th></tr>
        {{#bundles}}
        <tr class="bundle-row" data-bundle="{{bundleID}}"><td>{{bundleID}}</td><td{{#held}} class="held"{{/held}}>{{heldText}}</td>
        <td>{{delivered}}</td><td>{{invalidToken}}</td><td>{{retried}}</td><td>{{dead}}</td>
        <td>{{deliveredPerMinute}}</td><td>{{retriedPerMinute}}</td><td>{{deadPerMinute}}</td><td>{{inFlight}}</td>
        <td>{{connections}}</td><td>{{workDepth}}</td><td>{{retryDepth}}</td><td>{{deadDepth}}</td></tr>
        {{/bundles}}
        </table>
        <h2>Dead jobs</h2>
        <table id="dead-jobs">
        <tr><th>bundle</th><th>job id</th><th>reason</th><th>status</th><th>attempts</th><th>failed at</th>
        <th>token</th><th>error</th><th>body</th><th></th></tr>
        {{#deadJobs}}
        <tr class="dead-job" data-job-id="{{jobID}}"><td>{{bundleID}}</td><td>{{jobID}}</td><td>{{reason}}</td><td>{{status}}</td>
        <td>{{attempts}}</td><td>{{failedAt}}</td><td>{{token}}</td><td>{{error}}</td><td class="body">{{body}}</td>
        <td>{{#requeuePath}}<form method="post" action="{{requeuePath}}"><button type="submit">Requeue</button></form>{{/requeuePath}}</td></tr>
        {{/deadJobs}}
        {{^deadJobs}}<tr><td colspan="10">No dead jobs.</td></tr>{{/deadJobs}}
        </table>
        {{#deadJobsTruncated}}<p>Showing the first {{deadJobsShown}} dead jobs; use the JSON API for all.</p>{{/deadJobsTruncated}}
        </body>
        </html>
        """

    /// What a browser sees without the token: how to log in, nothing else.
    static let loginPage = """
        <!DOCTYPE html>
        <html lang="en"><head><meta charset="utf-8"><title>apns-worker admin</title></head>
        <body><h1>apns-worker admin</h1>
        <p>This page needs the admin token. Open <code>/login?token=…</code> once; it sets a cookie.</p>
        </body></html>
        """

    static let library: MustacheLibrary = {
        var library = MustacheLibrary()
        // The templates are constants of this file: a parse error is a programming error.
        try! library.register(statusPage, named: "status")
        try! library.register(loginPage, named: "login")
        return library
    }()
}
