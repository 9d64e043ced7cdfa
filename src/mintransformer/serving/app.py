"""The web application: the JSON API, the page, and `serve`, which runs them.

`create_app(service, ...)` builds the FastAPI app around a loaded service
(`services.load_service`); `serve(args)` is `mintransformer serve`: it loads the
run and runs uvicorn, while the model compiles its shapes in the background, until
SIGTERM or Ctrl-C, which finish the requests in flight, refuse new connections, and
exit 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import ipaddress
import json
import logging
import os
import signal
import socket
import sys
from collections.abc import AsyncIterator
from importlib import resources
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import FileResponse, JSONResponse, Response, StreamingResponse
from fastapi.staticfiles import StaticFiles
from fastapi_offline import FastAPIOffline
from starlette.exceptions import HTTPException

from mintransformer.backend.compile_cache import cache_summary
from mintransformer.serving import schemas
from mintransformer.serving.guard import RequestGuard
from mintransformer.serving.limits import Limits, RequestError
from mintransformer.serving.services import Service

log = logging.getLogger("mintransformer.serving")
STATIC = Path(str(resources.files("mintransformer.serving") / "static"))
# The status nginx logs for a request whose client closed the connection: nobody reads it.
CLIENT_CLOSED_REQUEST = 499
PROBLEMS = {status: {"model": schemas.Problem} for status in (400, 404, 413, 415, 422)}


def create_app(
    service: Service,
    cors_origins: tuple[str, ...] = (),
    loopback_only: bool = True,
    warm_beams: tuple[int, ...] = (1,),
    started: bool = False,
) -> FastAPI:
    """The FastAPI app serving `service`: API under /api, the page at /.

    Args:
        service: the loaded model (`services.load_service`).
        cors_origins: origins allowed to call cross-origin (none by default).
        loopback_only: refuse Host headers that are not a loopback address.
        warm_beams: beam sizes compiled at start-up (translation).
        started: the service is already started (`start_service`); else the app's
            start-up starts it.
    """

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI):
        if not started:
            start_service(service, warm_beams)
        yield
        service.stop()
        log.info("stopped")

    # FastAPI's own /docs and /redoc load Swagger UI and ReDoc from a CDN; these serve
    # the copies packaged in fastapi-offline, so both pages work with no network.
    app = FastAPIOffline(
        title="mintransformer",
        summary=f"Serving a {service.task} run ({service.path.name}).",
        lifespan=lifespan,
    )
    _add_error_handlers(app)
    limits = service.limits

    def require(task: str) -> None:
        if service.task != task:
            raise RequestError(404, f"this server holds a {service.task} run, not a {task} run.")

    @app.get("/api/health", response_model=schemas.Health, tags=["server"])
    async def health():
        """Whether the server is up, its task, and how far its background warm-up is
        (translation: the bucket shapes compiled, of those it compiles)."""
        return {"status": "ok", "task": service.task, "warm_up": service.warm_status()}

    @app.get("/api/info", tags=["server"])
    async def info():
        """The task, model sizes, the run's config, its training result (log.csv), the limits."""
        return service.info()

    @app.post(
        "/api/translate",
        response_model=schemas.TranslateResponse,
        responses=PROBLEMS,
        tags=["tasks"],
    )
    async def translate(request: schemas.TranslateRequest):
        """Translates each text: greedy, or beam search with its n-best list and scores;
        optionally every attention map of each result."""
        require("translation")
        results = await service.translate(
            request.texts, request.beam_size, request.alpha, request.n_best, request.attention
        )
        return {"results": results}

    @app.post(
        "/api/classify",
        response_model=schemas.ClassifyResponse,
        responses=PROBLEMS,
        tags=["tasks"],
    )
    async def classify(request: schemas.ClassifyRequest):
        """The label of each text and the probability of every label; optionally the
        encoder's attention over each text."""
        require("classification")
        return {"results": await service.classify(request.texts, request.attention)}

    @app.post(
        "/api/generate",
        responses={200: {"model": schemas.GenerateResponse}, **PROBLEMS},
        tags=["tasks"],
    )
    async def generate(request: schemas.GenerateRequest, connection: Request):
        """Continues the prompt. With `stream` (default), NDJSON: one `{"token", "id"}`
        line per token as it is produced, then `{"done": true, "text"}`."""
        require("language_model")
        service.check(request.prompt, request.max_new_tokens)
        options = request.model_dump(exclude={"prompt", "stream"})
        events = service.generate(request.prompt, **options)
        if request.stream:
            lines = (json.dumps(event) + "\n" async for event in events)
            return StreamingResponse(lines, media_type="application/x-ndjson")
        collected = await _collect_while_connected(events, connection)
        if collected is None:
            return Response(status_code=CLIENT_CLOSED_REQUEST)
        tokens = [event["token"] for event in collected if "token" in event]
        return {"text": collected[-1]["text"], "tokens": tokens}

    @app.get("/", include_in_schema=False)
    async def page():
        return FileResponse(STATIC / "index.html")

    # Browsers ask for /favicon.ico whatever the page links; an SVG answers both.
    @app.get("/favicon.ico", include_in_schema=False)
    async def favicon():
        return FileResponse(STATIC / "favicon.svg", media_type="image/svg+xml")

    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    if cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=list(cors_origins),
            allow_methods=["GET", "POST"],
            allow_headers=["content-type"],
        )
    app.add_middleware(
        RequestGuard,
        max_body_bytes=limits.max_body_bytes,
        cors_origins=cors_origins,
        loopback_only=loopback_only,
    )
    return app


async def _collect_while_connected(
    events: AsyncIterator[dict], connection: Request, poll_seconds: float = 0.1
) -> list[dict] | None:
    """All of `events`; None, with the events closed (which stops their generation), once
    the client of `connection` has gone away. Streamed responses stop by themselves:
    Starlette closes their iterator when a write fails."""
    collecting = asyncio.ensure_future(_collect(events))
    while not (await asyncio.wait({collecting}, timeout=poll_seconds))[0]:
        if await connection.is_disconnected():
            collecting.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await collecting
            await events.aclose()
            return None
    return collecting.result()


async def _collect(events: AsyncIterator[dict]) -> list[dict]:
    return [event async for event in events]


def start_service(service: Service, warm_beams: tuple[int, ...]) -> None:
    """Starts the service's background work: for translation, compiling every bucket
    shape for `warm_beams` while no request waits (logged as each beam size is ready);
    other tasks compile their one shape here, logging how long it took."""
    if service.task == "translation":
        log.info("warming up in the background (%s)", _warm_summary(service, warm_beams))
        service.start(warm_beams)
    else:
        log.info("warming up (%s)", service.task)
        log.info("warmed up in %.1f s", service.start())


def listening_socket(host: str, port: int) -> socket.socket:
    """A TCP socket bound to `host:port`, for uvicorn to listen on.

    Bound before the model loads, so that a port in use or a host that is not this
    machine's is said at once, not after minutes of warming up.

    Raises:
        ValueError: naming the flag and why the address cannot be used.
    """
    try:
        family, kind, proto, _, address = socket.getaddrinfo(
            host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )[0]
    except socket.gaierror as err:
        raise ValueError(f"--host {host}: no such address ({err.strerror})") from None
    listener = socket.socket(family, kind, proto)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        listener.bind(address)
    except OSError as err:
        listener.close()
        hint = ": another program listens there; choose another --port"
        in_use = err.errno == errno.EADDRINUSE
        raise ValueError(
            f"cannot listen on {host}:{port}: {err.strerror}" + (hint if in_use else "")
        ) from None
    listener.set_inheritable(True)
    return listener


def _log_compile_cache() -> None:
    """Where compiled programs are kept, and how many there are (JAX only)."""
    if "keras" not in sys.modules:  # an export engine: nothing compiled
        return
    import keras

    folder = os.environ.get("JAX_COMPILATION_CACHE_DIR")
    if keras.backend.backend() != "jax":
        log.info("compiled programs are not kept between starts on %s", keras.backend.backend())
    elif folder:
        log.info("compiled programs kept in %s", cache_summary(folder))


def _warm_summary(service: Service, warm_beams: tuple[int, ...]) -> str:
    if service.task != "translation":
        return service.task
    shapes = len(service.buckets.shapes())
    return (
        f"{shapes} shapes x beam sizes {list(warm_beams)}: widths {service.buckets.widths}, "
        f"rows {service.buckets.rows}"
    )


NOT_JSON = "the request body is not valid JSON"
# FastAPI's detail for a body `json.loads` failed on other than by a syntax error
# (a RecursionError, for JSON nested thousands of levels deep).
UNPARSED_BODY = "There was an error parsing the body"


def _add_error_handlers(app: FastAPI) -> None:
    """Every error as `{"error": ...}` JSON: 4xx naming the problem, never a bare 500."""

    @app.exception_handler(RequestError)
    async def refused(request: Request, err: RequestError):
        return JSONResponse({"error": err.message}, status_code=err.status)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, err: RequestValidationError):
        errors = err.errors()
        content_type = request.headers.get("content-type", "")
        about_body = any(e.get("loc", ("",))[0] == "body" for e in errors)
        if about_body and not _is_json(content_type):  # FastAPI then validates the raw bytes
            sent = f"is {content_type!r}" if content_type else "is missing"
            message = "the request body must be JSON, sent with Content-Type: application/json"
            return JSONResponse({"error": f"{message} (this one's {sent})."}, status_code=415)
        if any(e.get("type") == "json_invalid" for e in errors):
            return JSONResponse(
                {"error": f"{NOT_JSON}.", "detail": _plain(errors)}, status_code=400
            )
        message = "; ".join(
            f"{'.'.join(str(part) for part in e['loc'] if part != 'body') or 'body'}: {e['msg']}"
            for e in errors
        )
        return JSONResponse({"error": message, "detail": _plain(errors)}, status_code=422)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, err: HTTPException):
        message = str(err.detail)
        if err.status_code == 400 and message == UNPARSED_BODY:
            message = f"{NOT_JSON} (or is nested too deeply to read)."
        # Headers such as a 405's Allow are part of the answer.
        return JSONResponse({"error": message}, status_code=err.status_code, headers=err.headers)

    @app.exception_handler(Exception)
    async def unexpected(request: Request, err: Exception):
        log.exception("unexpected error on %s", request.url.path)
        return JSONResponse({"error": f"internal error: {type(err).__name__}"}, status_code=500)


def _is_json(content_type: str) -> bool:
    """Whether a Content-Type header says JSON, as FastAPI reads it (`application/json`,
    `application/*+json`, any parameters)."""
    media_type = content_type.split(";")[0].strip().lower()
    return media_type == "application/json" or (
        media_type.startswith("application/") and media_type.endswith("+json")
    )


def _plain(errors: list[dict]) -> list[dict]:
    """Validation errors without their inputs (which may be huge) or context objects."""
    return [{"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]} for e in errors]


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or "localhost") reaches this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(args) -> None:
    """`mintransformer serve`: loads `args.run` and serves it until SIGTERM or Ctrl-C.

    The address is bound before the model loads, so a taken port is an error at once.
    Requests are answered as soon as the model is loaded; translation compiles its
    bucket shapes in the background meanwhile (`start_service`), with the programs
    kept in `--compile-cache` (set up before Keras starts) for the next start.
    """
    import uvicorn

    from mintransformer.serving.options import limits_from
    from mintransformer.serving.services import load_service

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    limits: Limits = limits_from(args)
    listener = listening_socket(args.host, args.port)
    service = load_service(args.run, args.engine, limits, args.max_batch_size, args.max_wait_ms)
    loopback = is_loopback(args.host)
    app = create_app(service, tuple(args.cors), loopback, args.warm_beams, started=True)
    _log_compile_cache()
    start_service(service, args.warm_beams)
    if loopback:
        log.info(
            "listening on %s only: this machine can connect, others cannot "
            "(--host 0.0.0.0 listens on every interface)",
            args.host,
        )
    else:
        log.warning("listening on %s: other machines can connect (no authentication)", args.host)
    log.info("cross-origin requests: %s", ", ".join(args.cors) or "refused (--cors ORIGIN)")
    config = uvicorn.Config(
        app,
        host=args.host,
        port=args.port,
        log_level="info",
        timeout_graceful_shutdown=args.shutdown_timeout,
    )
    # uvicorn re-raises the signal that stopped it once it has shut down gracefully;
    # with these handlers that ends `serve` normally, so the process exits 0.
    for stop_signal in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop_signal, lambda number, frame: None)
    uvicorn.Server(config).run(sockets=[listener])
