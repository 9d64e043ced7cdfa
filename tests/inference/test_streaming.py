"""Chunked translate/classify: output as it is made, in input order, one line per line."""

import gzip

import pytest

from mintransformer import cli
from mintransformer.data.text import count_lines, iter_lines, read_lines
from mintransformer.inference import streaming
from mintransformer.inference.classifier import Classifier
from mintransformer.inference.translator import Translator


class WriteFailedError(Exception):
    pass


def counting(lines, consumed):
    for line in lines:
        consumed.append(line)
        yield line


def test_results_come_a_chunk_at_a_time_in_input_order():
    lines = [f"line {i}" for i in range(10)]
    consumed, chunks = [], []

    def process(chunk):
        chunks.append(len(chunk))
        return [line.upper() for line in chunk]

    results = streaming.map_lines(counting(lines, consumed), process, chunk_size=4)
    assert next(results) == "LINE 0"
    assert len(consumed) == 4  # the first result came before the rest was read
    assert [next(results) for _ in range(9)] == [line.upper() for line in lines[1:]]
    assert chunks == [4, 4, 2]
    with pytest.raises(StopIteration):
        next(results)


def test_a_result_count_that_differs_from_the_chunk_is_refused():
    with pytest.raises(RuntimeError, match="3 lines gave 2 results"):
        list(streaming.map_lines(["a", "b", "c"], lambda chunk: chunk[:2]))


def test_the_output_file_appears_only_when_complete(tmp_path):
    output = tmp_path / "out.txt"

    def lines():
        for i in range(3):
            assert not output.exists()
            [temporary] = tmp_path.iterdir()  # written beside it, then renamed
            assert temporary.name.startswith(".out.txt.") and temporary.suffix == ".tmp"
            yield str(i)

    streaming.write_lines(lines(), output)
    assert output.read_text() == "0\n1\n2\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


def test_an_interrupted_run_leaves_the_old_output_and_no_half_file(tmp_path):
    output = tmp_path / "out.txt"
    output.write_text("old\n")

    def lines():
        yield "new"
        raise WriteFailedError

    with pytest.raises(WriteFailedError):
        streaming.write_lines(lines(), output)
    assert output.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["out.txt"]


@pytest.mark.parametrize(
    "content",
    [b"", b"a", b"a\n", b"a\r\nb\r\n", b"\xef\xbb\xbfa\n\nb", b"x\xe2\x80\xa8y\n\n\n", b"\n"],
)
@pytest.mark.parametrize("suffix", [".txt", ".txt.gz"])
def test_lazy_reading_gives_the_lines_read_lines_gives(tmp_path, content, suffix):
    path = tmp_path / f"in{suffix}"
    path.write_bytes(gzip.compress(content) if suffix.endswith(".gz") else content)
    assert list(iter_lines(path)) == read_lines(path)
    assert count_lines(path) == len(read_lines(path))


def test_invalid_utf8_names_the_line(tmp_path):
    path = tmp_path / "in.txt"
    path.write_bytes(b"good\nstill good\nbad \xff\n")
    lines = iter_lines(path)
    assert [next(lines), next(lines)] == ["good", "still good"]
    with pytest.raises(ValueError, match="in.txt: line 3 is not valid UTF-8"):
        next(lines)


NUMBERS = ["five", "", "three hundred twelve", "  ", "nine thousand one", "forty-two"] * 40


def test_streamed_translation_equals_translating_all_at_once(trained_run):
    translator = Translator.from_run(trained_run.path)
    expected = translator.translate(NUMBERS)
    streamed = list(translator.translate_lines(iter(NUMBERS), chunk_size=50))
    assert streamed == expected and len(streamed) == len(NUMBERS)


def run_cli(capsys, *argv):
    code = cli.main(list(map(str, argv)))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_translate_input_to_output_file(capsys, tmp_path, trained_run):
    source = tmp_path / "in.txt"
    source.write_text("".join(line + "\n" for line in NUMBERS))
    output = tmp_path / "out.txt"
    code, out, err = run_cli(
        capsys, "translate", "--run", trained_run.path, "--input", source, "--output", output
    )
    assert code == 0 and out == ""
    assert "translating" in err and f"{len(NUMBERS)}/{len(NUMBERS)}" in err  # progress bar
    expected = Translator.from_run(trained_run.path).translate(NUMBERS)
    assert read_lines(output) == expected
    code, out, _ = run_cli(capsys, "translate", "--run", trained_run.path, "--input", source)
    assert out == "".join(line + "\n" for line in expected)


def test_classify_input_to_output_file_equals_classifying_all_at_once(
    capsys, tmp_path, untrained_classifier_run
):
    texts = ["a good film", "", "bad", "not good at all " * 20, "\t"] * 120
    source = tmp_path / "in.txt"
    source.write_text("".join(text + "\n" for text in texts))
    output = tmp_path / "out.txt"
    code, _, _ = run_cli(
        capsys,
        "classify",
        "--run",
        untrained_classifier_run.path,
        "--input",
        source,
        "--output",
        output,
    )
    assert code == 0
    expected = [str(p) for p in Classifier.from_run(untrained_classifier_run.path).classify(texts)]
    assert read_lines(output) == expected and len(expected) == len(texts)


def test_texts_given_as_arguments_and_as_a_file_are_refused(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("one\n")
    with pytest.raises(ValueError, match=r"both as arguments \(2\) and as --input .*in\.txt"):
        streaming.open_input(["a", "b"], path)
    assert list(streaming.open_input([], path)[0]) == ["one"]
