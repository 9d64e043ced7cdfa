"""The `mintransformer` command line."""

from __future__ import annotations

import argparse
import sys


def demo(args: argparse.Namespace) -> None:
    """The seed forward pass: (64, 38) and (64, 36) token ids -> (64, 36, 8000) logits."""
    import numpy as np

    from mintransformer import MinTransformer

    model = MinTransformer(4, 128, 8, 512, 8500, 8000, pe_input=1000, pe_target=1000)
    rng = np.random.default_rng(0)
    source = rng.integers(1, 8500, size=(64, 38))
    target = rng.integers(1, 8000, size=(64, 36))
    logits, weights = model((source, target), return_attention_weights=True)
    print(f"logits {tuple(logits.shape)}; {model.count_params():,} parameters")
    for name, w in weights.items():
        print(f"  {name}: {tuple(w.shape)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="mintransformer", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="run the seed forward pass").set_defaults(run=demo)
    args = parser.parse_args(argv)
    args.run(args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
