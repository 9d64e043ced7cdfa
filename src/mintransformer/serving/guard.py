"""The checks every request passes before FastAPI sees it (a pure ASGI middleware).

- Cross-origin requests are refused (403) unless their Origin was allowed with
  `--cors`: a web page elsewhere cannot make a browser call this server.
- On a loopback address, the Host header must name the loopback too (so a page
  whose domain is made to resolve to 127.0.0.1, DNS rebinding, is refused: 421).
- A body larger than `--max-body-bytes` is refused (413) without being read whole,
  and a body that is not UTF-8 gets 400 rather than a decoding error deep inside.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

LOOPBACK_NAMES = ("127.0.0.1", "localhost", "[::1]", "::1")


async def send_problem(send, status: int, message: str) -> None:
    """Answers `{"error": message}` with `status`."""
    body = json.dumps({"error": message}).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(body))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class RequestGuard:
    """ASGI middleware applying the module's checks around `app`.

    Args:
        app: the ASGI app.
        max_body_bytes: the largest body accepted.
        cors_origins: origins allowed to call cross-origin (`--cors`).
        loopback_only: whether the server listens on a loopback address only.
    """

    def __init__(self, app, max_body_bytes: int, cors_origins=(), loopback_only: bool = True):
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.cors_origins = {origin.rstrip("/") for origin in cors_origins}
        self.loopback_only = loopback_only

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = {name.decode("latin-1").lower(): value for name, value in scope["headers"]}
        host = headers.get("host", b"").decode("latin-1")
        if self.loopback_only and _host_name(host) not in LOOPBACK_NAMES:
            return await send_problem(
                send, 421, f"Host {host!r} is not this loopback server's address."
            )
        origin = headers.get("origin", b"").decode("latin-1").rstrip("/")
        if origin and origin not in self.cors_origins and urlsplit(origin).netloc != host:
            return await send_problem(
                send,
                403,
                f"cross-origin request from {origin!r} refused (start the server with "
                "--cors ORIGIN to allow one).",
            )
        if scope["method"] not in ("POST", "PUT", "PATCH"):
            return await self.app(scope, receive, send)
        declared = headers.get("content-length", b"0")
        if declared.isdigit() and int(declared) > self.max_body_bytes:
            return await send_problem(send, 413, self._too_large())
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_body_bytes:
                return await send_problem(send, 413, self._too_large())
            chunks.append(chunk)
            if not message.get("more_body", False):
                break
        body = b"".join(chunks)
        try:
            body.decode("utf-8")
        except UnicodeDecodeError as err:
            return await send_problem(
                send, 400, f"the request body is not valid UTF-8 (byte {err.start})."
            )
        replayed = False

        async def replay():
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        return await self.app(scope, replay, send)

    def _too_large(self) -> str:
        return (
            f"the request body is larger than {self.max_body_bytes} bytes "
            "(the server's --max-body-bytes)."
        )


def _host_name(host: str) -> str:
    """The name part of a Host header ("127.0.0.1:8000" -> "127.0.0.1")."""
    if host.startswith("["):
        return host[: host.find("]") + 1]
    return host.rsplit(":", 1)[0] if host.count(":") == 1 else host
