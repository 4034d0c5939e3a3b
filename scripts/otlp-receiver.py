#!/usr/bin/env python3
"""A real OTLP/HTTP trace receiver for the tests: accepts POST /v1/traces, decodes each body as an
ExportTraceServiceRequest (opentelemetry-proto, protobuf encoding) and appends one JSON line per
span to OUT: service name, trace and span ids (hex), parent, name, kind, status, attributes and
links. A body that does not decode is answered 400 and recorded as {"error": ...}.

    otlp-receiver.py PORTFILE OUT    listens on 127.0.0.1 on an ephemeral port, written to PORTFILE
"""
import json
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)


def value(any_value):
    kind = any_value.WhichOneof("value")
    return getattr(any_value, kind) if kind else None


def attributes(pairs):
    return {pair.key: value(pair.value) for pair in pairs}


def spans(request):
    for resource_spans in request.resource_spans:
        resource = attributes(resource_spans.resource.attributes)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                yield {
                    "service": resource.get("service.name"),
                    "traceId": span.trace_id.hex(),
                    "spanId": span.span_id.hex(),
                    "parentSpanId": span.parent_span_id.hex(),
                    "name": span.name,
                    "kind": span.kind,
                    "status": span.status.code,
                    "attributes": attributes(span.attributes),
                    "links": [{"traceId": link.trace_id.hex(), "spanId": link.span_id.hex()} for link in span.links],
                }


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        if self.path != "/v1/traces":
            self.send_response(404)
            self.end_headers()
            return
        try:
            request = ExportTraceServiceRequest.FromString(body)
            lines = [json.dumps(span) for span in spans(request)]
        except Exception as error:  # a body that is no ExportTraceServiceRequest
            lines = [json.dumps({"error": str(error)})]
            request = None
        # Written before the answer: a worker that exits once its last export is answered
        # leaves every span it sent in the file.
        with open(sys.argv[2], "a") as out:
            for line in lines:
                out.write(line + "\n")
        if request is None:
            self.send_response(400)
            self.end_headers()
            return
        reply = ExportTraceServiceResponse().SerializeToString()
        self.send_response(200)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply)

    def log_message(self, *args):
        pass


server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
with open(sys.argv[1] + ".tmp", "w") as portfile:
    portfile.write(str(server.server_address[1]))
import os  # noqa: E402

os.rename(sys.argv[1] + ".tmp", sys.argv[1])
server.serve_forever()
