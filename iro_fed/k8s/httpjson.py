"""What the extender, the webhook and the loopback API server share: a JSON-over-HTTP/1.1
request handler and a server thread."""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler
from socketserver import BaseServer
from typing import Any

log = logging.getLogger("iro_fed.k8s.http")


class JsonHandler(BaseHTTPRequestHandler):
    """Keep-alive HTTP/1.1 with JSON replies; access lines go to the debug log."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # headers and body go out without a 40 ms delayed-ACK stall

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
        log.debug("%s - " + format, self.address_string(), *args)

    def _content_length(self) -> int:
        """The request's Content-Length, or -1 when it is missing or not an integer."""
        try:
            return int(self.headers.get("Content-Length") or -1)
        except ValueError:
            return -1

    def _send(self, code: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def serve_in_thread(server: BaseServer, name: str) -> threading.Thread:
    """Run ``server.serve_forever`` in a daemon thread (short poll, so shutdown is prompt)."""
    t = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, name=name, daemon=True)
    t.start()
    return t
