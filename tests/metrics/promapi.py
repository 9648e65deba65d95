"""A loopback HTTP server that answers as the Prometheus query API does, for the tests of the
client and the snapshot: ``serve(respond)`` runs it and yields its URL; ``respond(handler)`` gives
``(status, body)`` for each GET, or None to send nothing."""

from __future__ import annotations

import json
import threading
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Respond = Callable[[BaseHTTPRequestHandler], "tuple[int, bytes] | None"]


def params(handler: BaseHTTPRequestHandler) -> dict[str, str]:
    """The query parameters of the request (``query``, ``timeout``, ...)."""
    return dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(handler.path).query))


def vector(result: list[Mapping]) -> bytes:
    """A successful instant-vector answer."""
    return json.dumps({"status": "success", "data": {"resultType": "vector", "result": result}}).encode()


@contextmanager
def serve(respond: Respond) -> Iterator[str]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            answer = respond(self)
            if answer is None:
                return
            status, body = answer
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
