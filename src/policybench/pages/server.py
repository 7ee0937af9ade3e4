"""A small HTTP server for pages where a person works on a run (scoring, attended rollouts):
routes to handlers, JSON in and out, a run directory's files (with ranges, for video), Jinja2
pages on one shell (`templates/shell.html.j2`). Loopback by default; standard library only."""

from __future__ import annotations

import contextlib
import json
import socket
import sys
import threading
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

LOOPBACK = "127.0.0.1"
FILES = "/files/"  # GET /files/<path relative to the served directory>
JSON_TYPE = "application/json"
MEDIA_TYPES = {".mp4": "video/mp4", ".png": "image/png", ".json": JSON_TYPE, ".css": "text/css"}


MAX_BODY_BYTES = 1 << 20  # a verdict or an answer is a few hundred bytes of JSON
REQUEST_TIMEOUT_S = 30.0  # how long a request may take to arrive
MAX_HANDLERS = 64  # connections answered at once (each a thread, and its deadline's)
BUSY = b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"


class HttpError(Exception):
    """A request the server refuses: its status and a message saying what was expected."""

    def __init__(self, status: HTTPStatus, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    query: Mapping[str, str]  # the first value of each query parameter
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)  # names in lower case

    def json(self) -> dict[str, Any]:
        """The body as a JSON object, or a 400 saying so."""
        try:
            data = json.loads(self.body or b"null")
        except (json.JSONDecodeError, UnicodeDecodeError) as error:
            raise HttpError(HTTPStatus.BAD_REQUEST, f"expected a JSON body: {error}") from None
        if not isinstance(data, dict):
            raise HttpError(
                HTTPStatus.BAD_REQUEST, f"expected a JSON object, got {type(data).__name__}"
            )
        return data


@dataclass(frozen=True)
class Response:
    body: bytes
    content_type: str = "text/html; charset=utf-8"
    status: HTTPStatus = HTTPStatus.OK
    headers: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of_json(cls, data: Any, status: HTTPStatus = HTTPStatus.OK) -> Response:
        return cls(json.dumps(data, sort_keys=True).encode(), JSON_TYPE, status)

    @classmethod
    def of_html(cls, text: str) -> Response:
        return cls(text.encode("utf-8"))


Handler = Callable[[Request], Response]
Routes = Mapping[tuple[str, str], Handler]  # (method, path) -> handler


def page_templates(own: str) -> Any:
    """The Jinja2 environment of a front's pages: the templates of its package `own`, then the
    pages' shell, then the report's (the shell extends the report's base, so both look alike)."""
    import jinja2

    return jinja2.Environment(
        loader=jinja2.ChoiceLoader(
            [
                jinja2.PackageLoader(own, "templates"),
                jinja2.PackageLoader("policybench.pages", "templates"),
                jinja2.PackageLoader("policybench.report", "templates"),
            ]
        ),
        autoescape=jinja2.select_autoescape(default=True),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def file_response(
    root: Path, relative: str, range_header: str | None, shown: Collection[str]
) -> Response:
    """A file under `root` that the page shows (`shown`, paths relative to `root`; a 404 for any
    other, so a blinded run's key and records stay out of a scorer's reach), or the byte range
    asked for."""
    name = unquote(relative)
    if "\x00" in name:  # a path the file system cannot hold: no file of this page
        raise HttpError(HTTPStatus.BAD_REQUEST, f"no file {relative!r}: a path holds no NUL")
    path = (root / name).resolve()
    if (
        not path.is_relative_to(root.resolve())
        or path.relative_to(root.resolve()).as_posix() not in shown
        or not path.is_file()
    ):
        raise HttpError(HTTPStatus.NOT_FOUND, f"no file {relative!r} on this page")
    media = MEDIA_TYPES.get(path.suffix, "application/octet-stream")
    size = path.stat().st_size
    if range_header and range_header.startswith("bytes="):
        first, _, last = range_header[len("bytes=") :].split(",")[0].partition("-")
        try:
            start = int(first) if first else max(0, size - int(last or 0))
            end = min(size - 1, int(last)) if first and last else size - 1
        except ValueError:  # not numbers: as unsatisfiable as a range past the end
            start, end = size, size
        if start >= size or start > end:
            raise HttpError(HTTPStatus.REQUESTED_RANGE_NOT_SATISFIABLE, f"range {range_header}")
        with path.open("rb") as file:
            file.seek(start)
            body = file.read(end - start + 1)
        headers = {"Content-Range": f"bytes {start}-{end}/{size}", "Accept-Ranges": "bytes"}
        return Response(body, media, HTTPStatus.PARTIAL_CONTENT, headers)
    return Response(path.read_bytes(), media, headers={"Accept-Ranges": "bytes"})


def own_hosts(host: str, port: int) -> frozenset[str] | None:
    """The Host headers a request to this server may carry: the host it listens on with its
    port (on loopback, as `localhost` too); None when it listens on every address, where a
    person chose to let any name of the machine reach it."""
    if host in ("", "0.0.0.0", "::"):
        return None
    names = {host, LOOPBACK, "localhost"} if host in (LOOPBACK, "localhost") else {host}
    return frozenset(f"[{name}]:{port}" if ":" in name else f"{name}:{port}" for name in names)


def check_origin(request: Request, hosts: frozenset[str] | None) -> None:
    """Refuses what another web site may have a person's browser send (a 403 or a 415): a Host
    that is not this server's (a page reached through a name rebound to loopback), an Origin
    other than this server's own, or a POST whose body is not declared JSON (a plain form or a
    `no-cors` fetch may send text/plain, urlencoded or multipart data, never application/json)."""
    host = request.headers.get("host", "")
    if hosts is not None and host.lower() not in hosts:
        raise HttpError(
            HTTPStatus.FORBIDDEN,
            f"this server answers requests to {' or '.join(sorted(hosts))}, not to Host "
            f"{host!r}; open the URL it printed",
        )
    origin = request.headers.get("origin")
    if origin is not None and urlsplit(origin).netloc.lower() != host.lower():
        raise HttpError(
            HTTPStatus.FORBIDDEN,
            f"a request from {origin} (another site's page) is refused; only this server's own "
            "pages may send it requests",
        )
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if request.method == "POST" and kind != JSON_TYPE:
        raise HttpError(
            HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
            f"a POST must send its body as Content-Type {JSON_TYPE}, not {kind or 'none'!r}; "
            "nothing was recorded",
        )


class _Deadlined(BaseHTTPRequestHandler):
    """A request handler whose whole request must arrive within REQUEST_TIMEOUT_S, not each
    read: a request sent a byte every 10 s would otherwise hold a thread as long as it likes.
    A handler calls `arrived()` once it has read the request; answering may take its time."""

    timeout = REQUEST_TIMEOUT_S  # a read that waits longer is cut off

    def setup(self) -> None:
        super().setup()
        self._deadline = threading.Timer(REQUEST_TIMEOUT_S, self._cut)
        self._deadline.daemon = True
        self._deadline.start()

    def arrived(self) -> None:
        self._deadline.cancel()

    def _cut(self) -> None:
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def finish(self) -> None:
        self._deadline.cancel()
        with contextlib.suppress(OSError):
            super().finish()


class _Server(ThreadingHTTPServer):
    """A thread per connection, at most MAX_HANDLERS at once: one more is answered 503 at once
    and closed (300 idle connections once held 479 threads). Its backlog holds a burst of
    connections (socketserver's default of 5 drops the rest, and their clients retry a second
    later)."""

    request_queue_size = 128

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self._slots = threading.BoundedSemaphore(MAX_HANDLERS)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._slots.acquire(blocking=False):
            with contextlib.suppress(OSError):
                request.sendall(BUSY)
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away mid-answer (a page closed, a run's process interrupted while
        it waited on a long poll) is no error worth a traceback on the person's terminal."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


class PageServer:
    """Serves `routes` and, under /files/, the files of `root` that `shown()` names (the paths
    the page links to, relative to `root`; none by default); `start()` runs it on a thread of its
    own (for tests and for a page beside a running harness), `serve()` until interrupted."""

    def __init__(
        self,
        routes: Routes,
        root: Path,
        host: str = LOOPBACK,
        port: int = 0,
        shown: Callable[[], Collection[str]] = frozenset,
    ) -> None:
        self.routes, self.root, self.shown = dict(routes), root, shown
        self.httpd = _Server((host, port), self._handler_class())
        self.httpd.daemon_threads = True
        self._thread: threading.Thread | None = None
        self.hosts = own_hosts(host, self.httpd.server_address[1])

    @property
    def url(self) -> str:
        host, port = self.httpd.server_address[:2]
        return f"http://{host}:{port}/"

    def start(self) -> PageServer:
        self._thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self._thread.start()
        return self

    def serve(self) -> None:
        try:
            self.httpd.serve_forever()
        finally:
            self.httpd.server_close()

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        if self._thread is not None:
            self._thread.join()

    def __enter__(self) -> PageServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def respond(self, request: Request, range_header: str | None = None) -> Response:
        """What the server answers `request` with; a refusal as a JSON `{"error": message}`."""
        try:
            check_origin(request, self.hosts)
            if request.method == "GET" and request.path.startswith(FILES):
                relative = request.path[len(FILES) :]
                return file_response(self.root, relative, range_header, self.shown())
            handler = self.routes.get((request.method, request.path))
            if handler is None:
                known = sorted(f"{method} {path}" for method, path in self.routes)
                raise HttpError(
                    HTTPStatus.NOT_FOUND,
                    f"no page {request.method} {request.path}; this server has {', '.join(known)}",
                )
            return handler(request)
        except HttpError as error:
            return Response.of_json({"error": error.message}, error.status)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(_Deadlined):  # http.server names its methods do_GET, ...
            def _answer(self, method: str, head: bool = False) -> None:
                parts = urlsplit(self.path)
                length = self.headers.get("Content-Length") or "0"
                # str.isdigit takes "²" and other digits int() refuses: ASCII digits only.
                if not (length.isascii() and length.isdigit()) or int(length) > MAX_BODY_BYTES:
                    response = Response.of_json(
                        {"error": f"a body of at most {MAX_BODY_BYTES} bytes, with its length"},
                        HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                    )
                    self.close_connection = True  # its body, unread, cannot be skipped
                else:
                    query = {name: values[0] for name, values in parse_qs(parts.query).items()}
                    headers = {name.lower(): value for name, value in self.headers.items()}
                    body = self.rfile.read(int(length))
                    self.arrived()
                    request = Request(method, parts.path, query, body, headers)
                    response = server.respond(request, self.headers.get("Range"))
                self.send_response(response.status)
                self.send_header("Content-Type", response.content_type)
                self.send_header("Content-Length", str(len(response.body)))
                self.send_header("Cache-Control", "no-store")
                for name, value in response.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                if not head:
                    self.wfile.write(response.body)

            def do_GET(self) -> None:
                self._answer("GET")

            def do_HEAD(self) -> None:
                self._answer("GET", head=True)

            def do_POST(self) -> None:
                self._answer("POST")

            def log_message(self, format: str, *args: Any) -> None:
                pass  # a person is working on the page; the terminal stays theirs

        return Handler
