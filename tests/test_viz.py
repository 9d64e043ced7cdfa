"""Attention plots show the model's real weights, and files decode as images."""

import numpy as np
import pytest
from matplotlib import image as mpimg

from mintransformer import cli, viz
from mintransformer.inference.translator import Translator
from tests.conftest import to_numpy


@pytest.fixture(scope="module")
def maps(trained_run):
    return viz.attention_maps(Translator.from_run(trained_run.path), "three hundred twelve")


def forced_target(translator, translation: str) -> list[int]:
    """<s> + the translation's ids, cut to the decoder's positions as `attention_maps` does."""
    ids = [translator.tokenizer.start_id, *translator.tokenizer.encode(translation)]
    return ids[: translator.model.decoder.max_length]


def test_maps_are_the_model_weights_with_token_labels(trained_run, maps):
    translator = Translator.from_run(trained_run.path)
    ids = translator.encode_sources(["three hundred twelve"])
    target = forced_target(translator, maps.translation)
    _, direct = translator.model((np.array(ids), np.array([target])), return_attention_weights=True)
    for name, weights in direct.items():
        np.testing.assert_allclose(maps.weights[name], to_numpy(weights)[0], rtol=1e-5, atol=1e-6)
    cross, rows, cols = maps.get("cross", 1)
    assert cross.shape[1:] == (len(rows), len(cols))
    assert cols == maps.source_tokens and cols[-1] == "</s>"
    assert rows[-1] == "</s>" and maps.get("decoder", 1)[2][0] == "<s>"
    np.testing.assert_allclose(cross.sum(-1), 1.0, rtol=1e-5)


def test_plotted_matrix_is_the_head_and_the_file_is_an_image(tmp_path, maps):
    figure = viz.plot_head(maps, "encoder", 1, head=1)
    plotted = np.asarray(figure.axes[0].images[0].get_array())
    np.testing.assert_array_equal(plotted, maps.get("encoder", 1)[0][1])
    np.testing.assert_allclose(plotted.sum(-1), 1.0, rtol=1e-5)
    width, height = figure.get_size_inches() * 100
    path = viz.save_figure(figure, tmp_path / "head.png", dpi=100)
    pixels = mpimg.imread(path)
    assert pixels.shape[:2] == (round(height), round(width))


def test_layer_grid_has_one_panel_per_head_and_alignment_is_the_mean(maps):
    heads = maps.get("cross", 1)[0].shape[0]
    grid = viz.plot_layer(maps, "cross", 1)
    drawn = [ax for ax in grid.axes if ax.images]
    assert len(drawn) == heads
    alignment = viz.plot_alignment(maps, 1)
    np.testing.assert_allclose(
        np.asarray(alignment.axes[0].images[0].get_array()), maps.get("cross", 1)[0].mean(0)
    )


def test_positional_encoding_plot_and_svg(tmp_path):
    figure = viz.plot_positional_encoding(16, 8)
    np.testing.assert_array_equal(
        np.asarray(figure.axes[0].images[0].get_array()), viz.sinusoidal_table(16, 8)
    )
    path = viz.save_figure(figure, tmp_path / "pe.svg")
    assert path.read_text().lstrip().startswith("<?xml")
    with pytest.raises(ValueError, match=".png or .svg"):
        viz.save_figure(viz.plot_positional_encoding(4, 4), tmp_path / "pe.jpg")


def test_bad_layer_head_and_kind_are_clear_errors(maps):
    with pytest.raises(ValueError, match="layer"):
        maps.get("cross", 9)
    with pytest.raises(ValueError, match="kind"):
        maps.get("sideways", 1)
    with pytest.raises(ValueError, match="head"):
        viz.plot_head(maps, "cross", 1, head=99)


def test_cli_writes_the_picture(tmp_path, trained_run, capsys):
    out = tmp_path / "cross.png"
    code = cli.main(
        [
            "attention",
            "--run",
            str(trained_run.path),
            "five thousand",
            "--kind",
            "cross",
            "--layer",
            "1",
            "--mean",
            "-o",
            str(out),
        ]
    )
    assert code == 0 and out.is_file() and mpimg.imread(out).ndim == 3
    assert "five thousand  ->" in capsys.readouterr().out


def test_padded_columns_get_zero_weight_and_match_the_unpadded_maps(trained_run, maps):
    translator = Translator.from_run(trained_run.path)
    short = translator.encode_sources(["three hundred twelve"])[0]
    longer = translator.encode_sources(["seven hundred thousand four hundred three"])[0]
    assert len(longer) > len(short)
    padded = np.array([short + [0] * (len(longer) - len(short)), longer], "int32")
    target = forced_target(translator, maps.translation)
    _, weights = translator.model(
        (padded, np.array([target, target], "int32")), return_attention_weights=True
    )
    n = len(short)
    for kind, key in (("encoder", "encoder_layer1"), ("cross", "decoder_layer1_cross_attention")):
        batched = to_numpy(weights[key])[0]
        np.testing.assert_array_equal(batched[..., n:], 0.0)
        rows = batched[:, :n] if kind == "encoder" else batched
        np.testing.assert_allclose(rows[..., :n], maps.get(kind, 1)[0], rtol=1e-4, atol=1e-6)
