import gzip
import json

import numpy as np
import pytest

from mintransformer.data.labelled import (
    LabelSet,
    clean_text,
    read_labelled,
    split_validation,
    truncate,
)


def write_jsonl(path, records):
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "wt", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")


def test_html_line_breaks_become_spaces():
    assert clean_text("Great.<br /><br />Loved it<BR>really<br/>") == "Great. Loved it really"


@pytest.mark.parametrize("name", ["data.jsonl", "data.jsonl.gz"])
def test_jsonl_labels_are_read_as_strings(tmp_path, name):
    path = tmp_path / name
    write_jsonl(path, [{"text": "good<br />film", "label": 1}, {"text": "bad", "label": 0}])
    assert read_labelled(path) == [("good film", "1"), ("bad", "0")]


def test_csv_with_quoted_commas(tmp_path):
    path = tmp_path / "data.csv"
    path.write_text('id,text,label\n1,"fine, really",pos\n2,awful,neg\n', encoding="utf-8")
    assert read_labelled(path) == [("fine, really", "pos"), ("awful", "neg")]


def test_class_folders_as_in_aclimdb(tmp_path):
    for label, text in [("pos", "great"), ("neg", "dull"), ("unsup", "no label")]:
        (tmp_path / label).mkdir()
        (tmp_path / label / "0_7.txt").write_text(text, encoding="utf-8")
    assert sorted(read_labelled(tmp_path)) == [("dull", "neg"), ("great", "pos")]


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"text": "x", "label": None}, "line 2: label"),
        ({"text": "x", "label": 0.5}, "line 2: label"),
        ({"text": "x"}, 'line 2: expected an object with "text" and "label"'),
        ({"text": 3, "label": 1}, 'line 2: "text" must be a string'),
    ],
)
def test_bad_records_name_their_line(tmp_path, record, message):
    path = tmp_path / "data.jsonl"
    write_jsonl(path, [{"text": "ok", "label": 1}, record])
    with pytest.raises(ValueError, match=message):
        read_labelled(path)


def test_empty_file_unknown_format_and_missing_columns(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(ValueError, match="no labelled text"):
        read_labelled(empty)
    parquet = tmp_path / "data.parquet"
    parquet.touch()
    with pytest.raises(ValueError, match="unknown format '.parquet'"):
        read_labelled(parquet)
    csv_file = tmp_path / "bad.csv"
    csv_file.write_text("review,sentiment\nok,1\n")
    with pytest.raises(ValueError, match="`text` and `label`"):
        read_labelled(csv_file)
    with pytest.raises(FileNotFoundError):
        read_labelled(tmp_path / "missing.jsonl")


def test_label_set_orders_numbers_numerically_and_rejects_unknown_labels():
    labels = LabelSet.from_labels(["10", "2", "1", "2"])
    assert labels.names == ["1", "2", "10"]
    np.testing.assert_array_equal(labels.ids(["10", "1"]), [2, 0])
    with pytest.raises(ValueError, match="labels the model does not know: \\['7'\\]"):
        labels.ids(["7"], "test.jsonl")
    with pytest.raises(ValueError, match="at least two classes"):
        LabelSet.from_labels(["pos", "pos"])


def test_validation_split_is_seeded_and_disjoint():
    pairs = [(str(i), "a") for i in range(100)]
    train, val = split_validation(pairs, 0.1, seed=3)
    assert len(val) == 10 and len(train) == 90
    assert sorted(train + val) == sorted(pairs)
    assert split_validation(pairs, 0.1, seed=3) == (train, val)
    with pytest.raises(ValueError, match="fraction"):
        split_validation(pairs, 1.0, seed=0)


def test_truncation_modes():
    ids = list(range(10))
    assert truncate(ids, 4, "head") == [0, 1, 2, 3]
    assert truncate(ids, 4, "tail") == [6, 7, 8, 9]
    assert truncate(ids, 8, "head_tail") == [0, 1, 4, 5, 6, 7, 8, 9]
    assert truncate(ids, 20, "head_tail") == ids
    with pytest.raises(ValueError, match="truncation"):
        truncate(ids, 4, "middle")


def test_csv_row_with_an_unquoted_comma_is_refused_with_its_line(tmp_path):
    path = tmp_path / "commas.csv"
    path.write_text("text,label\nawful,neg\nfine,pos\nGreat, loved it,pos\n", encoding="utf-8")
    with pytest.raises(ValueError, match="commas.csv, line 4: 3 columns, the header has 2 "):
        read_labelled(path)


def test_csv_row_missing_its_label_names_its_line(tmp_path):
    path = tmp_path / "short.csv"
    path.write_text("text,label\nawful,neg\nno label here\n", encoding="utf-8")
    with pytest.raises(ValueError, match="short.csv, line 3: 1 columns, the header has 2"):
        read_labelled(path)


def test_csv_from_excel_with_a_byte_order_mark_and_old_mac_line_ends(tmp_path):
    bom = tmp_path / "excel.csv"
    bom.write_bytes(b"\xef\xbb\xbftext,label\r\nfine,pos\r\nawful,neg\r\n")
    assert read_labelled(bom) == [("fine", "pos"), ("awful", "neg")]
    old_mac = tmp_path / "mac.csv"
    old_mac.write_bytes(b'text,label\r"two\rlines",pos\rawful,neg\r')
    assert read_labelled(old_mac) == [("two lines", "pos"), ("awful", "neg")]


def test_csv_the_csv_module_cannot_parse_names_its_line(tmp_path):
    path = tmp_path / "huge.csv"
    path.write_text('text,label\nfine,pos\n"' + "x" * 200_000 + '",neg\n', encoding="utf-8")
    with pytest.raises(ValueError, match="huge.csv, line 3: not valid CSV"):
        read_labelled(path)


LATIN_1_REVIEW = "caf\u00e9".encode("latin-1")


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("plain.jsonl.gz", b'{"text": "ok", "label": 1}\n', "plain.jsonl.gz: not a valid gzip"),
        (
            "cut.jsonl.gz",
            gzip.compress(b'{"text": "ok", "label": 1}\n' * 100, mtime=0)[:30],
            "cut.jsonl.gz: not a valid gzip",
        ),
        (
            "latin.jsonl",
            b'{"text": "ok", "label": 1}\n{"text": "' + LATIN_1_REVIEW + b'", "label": 0}\n',
            "latin.jsonl: line 2 is not valid UTF-8",
        ),
        (
            "latin.csv",
            b"text,label\nok,pos\n" + LATIN_1_REVIEW + b",neg\n",
            "latin.csv: line 3 is not valid UTF-8",
        ),
        (
            "cut.csv.gz",
            gzip.compress(b"text,label\n" + b"ok,pos\n" * 100, mtime=0)[:30],
            "cut.csv.gz: not a valid gzip",
        ),
    ],
)
def test_unreadable_files_are_refused_with_their_name(tmp_path, name, content, message):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(ValueError, match=message):
        read_labelled(path)


def test_a_class_folder_file_not_in_utf8_is_named(tmp_path):
    for label in ("pos", "neg"):
        (tmp_path / label).mkdir()
        (tmp_path / label / "0_7.txt").write_text("fine", encoding="utf-8")
    (tmp_path / "pos" / "1_9.txt").write_bytes(LATIN_1_REVIEW)
    with pytest.raises(ValueError, match=r"pos[/\\]1_9\.txt: line 1 is not valid UTF-8"):
        read_labelled(tmp_path)
