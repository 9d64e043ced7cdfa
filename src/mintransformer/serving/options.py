"""The flags of `mintransformer serve` (no Keras here: the command line reads them first)."""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import sys
from pathlib import Path

from mintransformer.inference.engines import ENGINE_CHOICES
from mintransformer.serving.limits import Limits

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000


def add_serve_flags(parser: argparse.ArgumentParser) -> None:
    """Adds the server's flags to the `serve` sub-command's parser."""
    parser.add_argument("--run", type=Path, required=True, help="run directory or export folder")
    parser.add_argument(
        "--engine",
        choices=ENGINE_CHOICES,
        default="keras",
        help="keras (default; the attention page needs it), onnx, ct2, or auto: the run's "
        "ct2, else onnx export, else keras",
    )
    parser.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"address to listen on (default {DEFAULT_HOST}: this machine only)",
    )
    parser.add_argument(
        "--port", type=port, default=DEFAULT_PORT, help="0: any free port (default 8000)"
    )
    parser.add_argument(
        "--cors",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="allow cross-origin requests from ORIGIN, e.g. https://example.org (repeatable)",
    )
    batching = parser.add_argument_group("batching")
    batching.add_argument(
        "--max-batch-size",
        type=positive_int,
        default=32,
        help="sentences (texts to classify) per call",
    )
    batching.add_argument(
        "--max-wait-ms",
        type=non_negative_float,
        default=5.0,
        help="how long a request waits for others",
    )
    batching.add_argument(
        "--warm-beams",
        type=warm_beam_sizes,
        default="1,4",
        help="beam sizes compiled for every bucket after start-up, while no request waits "
        '(comma-separated; 1 = greedy; "": none), each at most --max-beam',
    )
    parser.add_argument(
        "--compile-cache",
        default=None,
        metavar="DIR|off",
        help="folder where the Keras engine on JAX (serve's backend where installed, unless "
        "--backend or KERAS_BACKEND says otherwise) keeps the programs it compiles, so that "
        "a restart loads them (default ~/.cache/mintransformer/compiled; off: keep none)",
    )
    limits = parser.add_argument_group("limits of one request")
    defaults = Limits()
    for name, help in (
        ("max_texts", "texts per translate/classify request"),
        ("max_chars", "characters per text or prompt"),
        ("max_beam", "beam size"),
        ("max_new_tokens", "tokens per generate request"),
        ("max_body_bytes", "request body size"),
    ):
        parser_name = "--" + name.replace("_", "-")
        default = getattr(defaults, name)
        limits.add_argument(
            parser_name, type=positive_int, default=default, help=f"{help} ({default})"
        )
    parser.add_argument(
        "--shutdown-timeout",
        type=non_negative_float,
        default=30.0,
        help="seconds SIGTERM waits for requests in flight",
    )


def serving_backend(backend: str | None) -> str | None:
    """The Keras backend `serve` runs on: `--backend`, else `$KERAS_BACKEND`, else JAX
    where it is installed, since a restart then loads the programs it compiled
    (`backend.compile_cache`); else (or once Keras runs in this process) Keras' choice."""
    if backend or os.environ.get("KERAS_BACKEND") or "keras" in sys.modules:
        return backend
    return "jax" if importlib.util.find_spec("jax") else None


def limits_from(args: argparse.Namespace) -> Limits:
    """The `Limits` the parsed flags set; a ValueError (one line on the command line,
    before the model loads) for `--warm-beams` sizes over `--max-beam`."""
    too_large = [size for size in args.warm_beams if size > args.max_beam]
    if too_large:
        sizes = ",".join(map(str, args.warm_beams))
        raise ValueError(
            f"--warm-beams {sizes}: beam size {too_large[0]} is over --max-beam "
            f"{args.max_beam}, so no request could use it; lower it or raise --max-beam."
        )
    return Limits(
        max_texts=args.max_texts,
        max_chars=args.max_chars,
        max_beam=args.max_beam,
        max_new_tokens=args.max_new_tokens,
        max_body_bytes=args.max_body_bytes,
    )


def port(text: str) -> int:
    """`--port`: a TCP port, 0 to 65535 (0: the system picks a free one)."""
    value = _int(text)
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"{text} is not a port: ports are 0 to 65535")
    return value


def positive_int(text: str) -> int:
    """A count or size flag: a whole number of at least 1."""
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text} must be at least 1")
    return value


def non_negative_float(text: str) -> float:
    """A time flag: a finite number of at least 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text} must be a finite number of at least 0")
    return value


def warm_beam_sizes(text: str) -> tuple[int, ...]:
    """`--warm-beams`: comma-separated beam sizes, each at least 1 ("" for none).
    `limits_from` checks them against `--max-beam`."""
    parts = [part.strip() for part in text.split(",") if part.strip()]
    if not all(part.isdecimal() and int(part) >= 1 for part in parts):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a list of beam sizes: whole numbers of at least 1, "
            "comma-separated (such as 1,4)"
        )
    return tuple(int(part) for part in parts)


def _int(text: str) -> int:
    """`text` as an int; an argparse error naming it if it is not a whole number."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
