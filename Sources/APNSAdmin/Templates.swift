/// The Mustache templates of the admin HTML page, kept as string constants so the executable
/// needs no resource files. Every value is inserted with `{{ }}`, which HTML-escapes it; the
/// templates never use the unescaped `{{{ }}}` or `{{& }}` forms, because job bodies, reasons,
/// errors, host names and bundle IDs come from outside (the sync server, Apple, other
/// instances' heartbeats) and must not become markup.
import Mustache

enum Templates {
    /// The status page of the whole fleet: held and paused bundles first and loud, the instances,
    /// the live graph (its own self-refreshing frame), per-bundle fleet totals with pause and
    /// resume, queue depths and latency, and the retry and dead jobs with their actions. The
    /// tables' header colours are distinctive on purpose: the headless-browser test finds them
    /// in a screenshot. The job tables fit the window's width (a laptop's 1,366 px and up): their
    /// columns are shares of it, and a value longer than its column shows its first line cut
    /// with an ellipsis, the whole of it one click away (`details.cut`), as the dashboards of
    /// Sidekiq and RabbitMQ do; a job's error or body otherwise runs to dozens of lines.
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
          td { overflow-wrap: anywhere; }
          table.jobs { width: 100%; table-layout: fixed; }
          table.jobs td { overflow: hidden; }
          .w5 { width: 5%; } .w6 { width: 6%; } .w7 { width: 7%; } .w8 { width: 8%; } .w9 { width: 9%; } .w11 { width: 11%; }
          .w12 { width: 12%; } .w13 { width: 13%; } .w14 { width: 14%; } .w15 { width: 15%; } .w16 { width: 16%; }
          details.cut summary { display: block; white-space: nowrap; overflow: hidden; text-overflow: ellipsis; cursor: pointer; }
          details.cut[open] summary { white-space: pre-wrap; word-break: break-all; }
          td.id summary { max-width: 22em; }
          #instances th { background: rgb(0, 128, 0); color: #fff; }
          #bundles th { background: rgb(0, 102, 204); color: #fff; }
          #queues th { background: rgb(80, 80, 80); color: #fff; }
          #retry-jobs th { background: rgb(128, 0, 160); color: #fff; }
          #dead-jobs th { background: rgb(204, 51, 0); color: #fff; }
          .held, .paused { color: rgb(204, 0, 0); font-weight: bold; }
          .alert { padding: 8px 12px; border: 3px solid rgb(204, 0, 0); font-size: 18px; font-weight: bold; margin-bottom: 12px; }
          .body { font-family: monospace; }
          .notice { padding: 6px; background: #fff3cd; }
          iframe { border: 1px solid #bbb; width: 940px; height: 300px; }
          form.inline { display: inline; }
        </style>
        </head>
        <body>
        <h1>apns-worker</h1>
        <p>Broker: <span id="broker-state">{{broker}}</span> · Ready: <span id="ready">{{ready}}</span> · This instance: {{instanceID}} · Generated {{generatedAt}}</p>
        {{#configuration}}<p id="configuration">Configuration in force: loaded {{loadedAt}}, fingerprint <code id="config-fingerprint">{{fingerprint}}</code>, {{bundleCount}} bundles{{#pendingRestart}} · <span class="alert" id="config-pending-restart">changed, applied at the next restart: {{pendingRestart}}</span>{{/pendingRestart}}</p>{{/configuration}}
        {{#heldBundles}}<p class="alert" id="held-alert">HELD (APNs refuses the credentials or topic; jobs wait in the broker): {{.}}</p>{{/heldBundles}}
        {{#pausedBundles}}<p class="alert" id="paused-alert">PAUSED by an operator on every instance (jobs wait in the broker): {{.}}</p>{{/pausedBundles}}
        {{#queueError}}<p class="notice" id="queue-error">Queue depths and jobs unavailable: {{queueError}}</p>{{/queueError}}
        {{#fleetMissing}}<p class="notice">The fleet view is not running here: this page shows this instance only.</p>{{/fleetMissing}}
        <h2>Instances ({{instanceCount}})</h2>
        <table id="instances">
        <tr><th>instance</th><th>host</th><th>pid</th><th>version</th><th>started</th><th>last seen</th><th>memory (RSS)</th>
        <th>CPU</th><th>in flight</th><th>broker</th><th>held</th><th>paused</th></tr>
        {{#instances}}
        <tr class="instance-row" data-instance="{{id}}"><td>{{id}}{{#isSelf}} (this one){{/isSelf}}</td><td>{{host}}</td><td>{{pid}}</td><td>{{version}}</td>
        <td>{{startedAt}}</td><td>{{lastSeen}}</td><td>{{rss}}</td><td>{{cpu}}</td><td>{{inFlight}}</td><td>{{broker}}</td>
        <td class="held">{{held}}</td><td class="paused">{{paused}}</td></tr>
        {{/instances}}
        {{^instances}}<tr><td colspan="12">No heartbeat heard yet.</td></tr>{{/instances}}
        {{#instancesNotShown}}<tr id="instances-more"><td colspan="12">{{.}} more instances not drawn here: <code>GET /api/fleet</code> pages through every one.</td></tr>{{/instancesNotShown}}
        </table>
        <h2>Jobs per second, whole fleet, last 15 minutes</h2>
        <iframe id="graph-frame" src="/fleet/graph" title="jobs per second by end, last 15 minutes"></iframe>
        <h2>Bundles (whole fleet)</h2>
        <table id="bundles">
        <tr><th>bundle</th><th>state</th><th>delivered</th><th>invalid token</th><th>retried</th><th>dead</th>
        <th>last minute<br>delivered / invalid / retried / dead</th><th>in flight</th><th>connections</th>
        <th>queued<br>work / retry / dead</th><th></th></tr>
        {{#bundles}}
        <tr class="bundle-row" data-bundle="{{bundleID}}"><td class="id"><details class="cut"><summary title="{{bundleID}}">{{bundleID}}</summary></details></td><td{{#alarming}} class="held"{{/alarming}}>{{state}}</td>
        <td>{{delivered}}</td><td>{{invalidToken}}</td><td>{{retried}}</td><td>{{dead}}</td>
        <td class="rates">{{deliveredPerMinute}} / {{invalidPerMinute}} / {{retriedPerMinute}} / {{deadPerMinute}}</td><td>{{inFlight}}</td>
        <td>{{connections}}</td><td class="depths">{{workDepth}} / {{retryDepth}} / {{deadDepth}}</td>
        <td>{{#pausePath}}<form class="inline" method="post" action="{{pausePath}}"><button type="submit">Pause everywhere</button></form>{{/pausePath}}
        {{#resumePath}}<form class="inline" method="post" action="{{resumePath}}"><button type="submit">Resume everywhere</button></form>{{/resumePath}}</td></tr>
        {{/bundles}}
        {{#bundlesNotShown}}<tr id="bundles-more"><td colspan="11">{{.}} more bundles of the fleet not drawn here (this instance's and the busiest are): <code>GET /api/fleet</code> has every instance's bundles.</td></tr>{{/bundlesNotShown}}
        </table>
        {{#hasPools}}
        <h2>Connection pools (this instance)</h2>
        <table id="pools">
        <tr><th>pool</th><th>environment</th><th>connections</th><th>bundles</th></tr>
        {{#pools}}
        <tr class="pool-row" data-pool="{{name}}"><td>{{name}}</td><td>{{environment}}</td><td>{{connections}}</td><td>{{bundleCount}}: {{bundles}}</td></tr>
        {{/pools}}
        </table>
        {{/hasPools}}
        <h2>Queues</h2>
        <table id="queues">
        <tr><th>queue</th><th>role</th><th>ready</th><th>consumers</th><th>retry delay</th><th>oldest ready job</th></tr>
        {{#queues}}
        <tr class="queue-row" data-queue="{{queue}}"><td>{{queue}}</td><td>{{role}}</td><td>{{messages}}</td><td>{{consumers}}</td><td>{{delay}}</td><td>{{latency}}</td></tr>
        {{/queues}}
        </table>
        <h2>Retry jobs</h2>
        <table id="retry-jobs" class="jobs">
        <tr><th class="w14">bundle</th><th class="w16">queue</th><th class="w13">job id</th><th class="w7">attempt</th><th class="w9">last reason</th>
        <th class="w11">published</th><th class="w6">token</th><th class="w15">body</th><th class="w9"></th></tr>
        {{#retryJobs}}
        <tr class="retry-job" data-job-id="{{jobID}}"><td><details class="cut"><summary title="{{bundleID}}">{{bundleID}}</summary></details></td>
        <td><details class="cut"><summary title="{{queue}}">{{queue}}</summary></details></td>
        <td><details class="cut"><summary title="{{jobID}}">{{jobID}}</summary></details></td><td>{{attempts}}</td>
        <td><details class="cut"><summary>{{lastReason}}</summary></details></td>
        <td>{{publishedAt}}</td><td><details class="cut"><summary title="{{token}}">{{token}}</summary></details></td>
        <td class="body"><details class="cut"><summary>{{body}}</summary></details></td>
        <td>{{#requeuePath}}<form class="inline" method="post" action="{{requeuePath}}"><button type="submit">Requeue now</button></form>
        <form class="inline" method="post" action="{{purgePath}}"><button type="submit">Purge</button></form>{{/requeuePath}}</td></tr>
        {{/retryJobs}}
        {{^retryJobs}}<tr><td colspan="9" id="retry-jobs-none">{{#retryUnreadable}}Retry jobs could not be read: {{retryUnreadable}}{{/retryUnreadable}}{{^retryUnreadable}}No retry jobs.{{/retryUnreadable}}</td></tr>{{/retryJobs}}
        </table>
        {{#retryPartlyUnreadable}}<p class="notice" id="retry-unreadable">Not every retry job could be read: {{retryUnreadable}}</p>{{/retryPartlyUnreadable}}
        {{#retryJobsTruncated}}<p>Showing the first {{retryJobsShown}} retry jobs; use the JSON API for all.</p>{{/retryJobsTruncated}}
        <h2>Dead jobs</h2>
        <form method="get" action="/" id="dead-filter">Bundle <select name="bundle"><option value="">every bundle</option>
        {{#bundleChoices}}<option value="{{value}}"{{#selected}} selected{{/selected}}>{{value}}</option>{{/bundleChoices}}</select>
        Reason <input name="reason" value="{{deadReason}}" placeholder="e.g. BadDeviceToken"> <button type="submit">Filter</button></form>
        <p>With this filter: <a href="{{bulkRequeuePath}}">requeue every selected dead job…</a> · <a href="{{bulkPurgePath}}">purge every selected dead job…</a> (each asks to confirm)</p>
        <table id="dead-jobs" class="jobs">
        <tr><th class="w13">bundle</th><th class="w12">job id</th><th class="w9">reason</th><th class="w5">status</th><th class="w7">attempts</th>
        <th class="w11">failed at</th><th class="w7">token</th><th class="w14">error</th><th class="w14">body</th><th class="w8"></th></tr>
        {{#deadJobs}}
        <tr class="dead-job" data-job-id="{{jobID}}"><td><details class="cut"><summary title="{{bundleID}}">{{bundleID}}</summary></details></td>
        <td><details class="cut"><summary title="{{jobID}}">{{jobID}}</summary></details></td>
        <td><details class="cut"><summary title="{{reason}}">{{reason}}</summary></details></td><td>{{status}}</td>
        <td>{{attempts}}</td><td>{{failedAt}}</td><td><details class="cut"><summary title="{{token}}">{{token}}</summary></details></td>
        <td class="error"><details class="cut"><summary>{{error}}</summary></details></td>
        <td class="body"><details class="cut"><summary>{{body}}</summary></details></td>
        <td>{{#requeuePath}}<form method="post" action="{{requeuePath}}"><button type="submit">Requeue</button></form>
        <form method="post" action="{{purgePath}}"><button type="submit">Purge</button></form>{{/requeuePath}}</td></tr>
        {{/deadJobs}}
        {{^deadJobs}}<tr><td colspan="10" id="dead-jobs-none">{{#deadUnreadable}}Dead jobs could not be read: {{deadUnreadable}}{{/deadUnreadable}}{{^deadUnreadable}}No dead jobs.{{/deadUnreadable}}</td></tr>{{/deadJobs}}
        </table>
        {{#deadPartlyUnreadable}}<p class="notice" id="dead-unreadable">Not every dead job could be read: {{deadUnreadable}}</p>{{/deadPartlyUnreadable}}
        {{#deadPaged}}<p id="dead-pages">Dead jobs {{deadFirst}} to {{deadLast}}{{#deadJobsTruncated}}; <a href="{{deadNextPath}}">next page</a>{{/deadJobsTruncated}} · <a href="/">first page</a></p>{{/deadPaged}}
        </body>
        </html>
        """

    /// The confirmation step of a bulk requeue or purge: what will happen, to how many jobs,
    /// and one button that does it.
    static let confirmPage = """
        <!DOCTYPE html>
        <html lang="en"><head><meta charset="utf-8"><title>apns-worker admin: confirm</title>
        <style>body { font-family: sans-serif; margin: 16px; } .warn { font-weight: bold; color: rgb(204, 0, 0); }</style></head>
        <body><h1>Confirm</h1>
        <p id="confirm-summary">{{verb}} <strong>{{count}}</strong> {{kind}} jobs ({{selection}}).</p>
        {{#purge}}<p class="warn">Purged jobs are gone for good.</p>{{/purge}}
        <form method="post" action="{{actionPath}}"><button type="submit">{{verb}} {{count}} jobs</button></form>
        <p><a href="/">Cancel</a></p>
        </body></html>
        """

    /// What a browser sees without the token: how to log in, nothing else.
    static let loginPage = """
        <!DOCTYPE html>
        <html lang="en"><head><meta charset="utf-8"><title>apns-worker admin</title></head>
        <body><h1>apns-worker admin</h1>
        <form method="post" action="/login"><label>Admin token <input type="password" name="token" autocomplete="current-password"></label>
        <button type="submit">Log in</button></form>
        <p>Logging in sets a session cookie for this browser; it expires after a working day.</p>
        </body></html>
        """

    static let library: MustacheLibrary = {
        var library = MustacheLibrary()
        // The templates are constants of this file: a parse error is a programming error.
        try! library.register(statusPage, named: "status")
        try! library.register(confirmPage, named: "confirm")
        try! library.register(loginPage, named: "login")
        return library
    }()
}
