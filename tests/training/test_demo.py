"""`mintransformer demo` itself, trained as `make demo` trains it: every number below 1000.

Marked slow: it trains the demo's own config on its own corpus (about 2 minutes on two cores).
"""

import pytest

from mintransformer import cli
from mintransformer.data.corpora import number_splits, numbers_spec
from mintransformer.data.numbers import english_words, french_words, magnitude_of
from mintransformer.inference.translator import Translator

pytestmark = pytest.mark.slow


def test_the_demo_model_translates_every_number_below_1000(tmp_path, capsys) -> None:
    run = tmp_path / "numbers"
    assert cli.main(["demo", "--run", str(run), "--verbose", "0"]) == 0
    report = capsys.readouterr().out
    assert "0-999, every one" in report

    translator = Translator.from_run(run)
    below_1000 = list(range(1000))
    outputs = translator.translate([english_words(n) for n in below_1000])
    wrong = [(n, out) for n, out in zip(below_1000, outputs, strict=True) if out != french_words(n)]
    assert not wrong, f"{len(wrong)} of 0-999 wrong, e.g. {wrong[:5]}"

    # The demo's held-out numbers (never in training): at least 99.5% of each larger magnitude.
    held_out = [n for n in number_splits(numbers_spec(num_train=30_000))["test"] if n >= 1000]
    outputs = translator.translate([english_words(n) for n in held_out])
    for magnitude in (2, 3, 4):
        scored = [
            out == french_words(n)
            for n, out in zip(held_out, outputs, strict=True)
            if magnitude_of(n) == magnitude
        ]
        assert len(scored) >= 200 and sum(scored) >= 0.995 * len(scored), magnitude
