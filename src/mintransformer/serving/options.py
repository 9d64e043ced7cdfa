"""The flags of `mintransformer serve` (no Keras here: the command line reads them first)."""

from __future__ import annotations

import argparse
from pathlib import Path

from mintransformer.inference.engines import ENGINES
from mintransformer.serving.limits import Limits

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8000


def add_serve_flags(parser: argparse.ArgumentParser) -> None:
    """Adds the server's flags to the `serve` sub-command's parser."""
    parser.add_argument("--run", type=Path, required=True, help="run directory or export folder")
    parser.add_argument("--engine", choices=ENGINES, default="keras")
    parser.add_argument(
        "--host",
        default=DEFAULT_HOST,
        help=f"address to listen on (default {DEFAULT_HOST}: this machine only)",
    )
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument(
        "--cors",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="allow cross-origin requests from ORIGIN, e.g. https://example.org (repeatable)",
    )
    batching = parser.add_argument_group("batching")
    batching.add_argument(
        "--max-batch-size", type=int, default=32, help="sentences (texts to classify) per call"
    )
    batching.add_argument(
        "--max-wait-ms", type=float, default=5.0, help="how long a request waits for others"
    )
    batching.add_argument(
        "--warm-beams",
        default="1,4",
        help="beam sizes compiled for every bucket at start-up (comma-separated; 1 = greedy)",
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
        limits.add_argument(parser_name, type=int, default=default, help=f"{help} ({default})")
    parser.add_argument(
        "--shutdown-timeout",
        type=float,
        default=30.0,
        help="seconds SIGTERM waits for requests in flight",
    )


def limits_from(args: argparse.Namespace) -> Limits:
    """The `Limits` the parsed flags set."""
    return Limits(
        max_texts=args.max_texts,
        max_chars=args.max_chars,
        max_beam=args.max_beam,
        max_new_tokens=args.max_new_tokens,
        max_body_bytes=args.max_body_bytes,
    )
