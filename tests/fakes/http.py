"""What the small fake HTTP servers share: a threaded server on 127.0.0.1 (a random port), JSON replies.

A fake subclasses :class:`LocalHttpServer`, returns its request handler class from :meth:`handler_class`
and is started with ``start()`` or ``with``.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Mapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar, Self


def send_json(
    handler: BaseHTTPRequestHandler, status: int, payload: Any, headers: Mapping[str, str] | None = None
) -> None:
    """Answer the request ``handler`` serves with ``payload`` as JSON (content type and length set), with
    ``headers`` besides (e.g. ``Retry-After``)."""
    data = json.dumps(payload).encode()
    handler.send_response(status)
    for name, value in (headers or {}).items():
        handler.send_header(name, value)
    handler.send_header("content-type", "application/json")
    handler.send_header("content-length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


class QuietHandler(BaseHTTPRequestHandler):
    """A request handler that logs nothing."""

    def log_message(self, format: str, *args: Any) -> None:
        pass


class LocalHttpServer:
    """Serves :meth:`handler_class` on 127.0.0.1 from a daemon thread named :attr:`thread_name`."""

    thread_name: ClassVar[str] = "fake-http"
    server_class: ClassVar[type[ThreadingHTTPServer]] = ThreadingHTTPServer

    def __init__(self) -> None:
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def handler_class(self) -> type[BaseHTTPRequestHandler]:
        raise NotImplementedError

    @property
    def url(self) -> str:
        assert self._server is not None, "not started"
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> Self:
        self._server = self.server_class(("127.0.0.1", 0), self.handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name=self.thread_name)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
