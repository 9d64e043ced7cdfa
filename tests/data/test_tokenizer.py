"""Tests for the BPE tokenizer wrapper."""

from pathlib import Path

import pytest

from mintransformer.data.tokenizer import Tokenizer

ENGLISH = [
    "The man is walking in the street.",
    "What is it?",
    "I don't know where she went, but she'll be back soon!",
    "Two dogs are playing with a red ball.",
]
FRENCH = [
    "L'homme marche dans la rue.",
    "Qu'est-ce que c'est ?",
    "Je ne sais pas où elle est allée, mais elle reviendra bientôt\u202f!",
    "Deux chiens jouent avec une balle rouge à côté de l'église.",
    "Ça m'a été très utile : « merci » !",
]
CORPUS = (ENGLISH + FRENCH) * 5


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.train(CORPUS, vocab_size=200, min_frequency=2)


@pytest.mark.parametrize(
    "text",
    [
        *ENGLISH,
        "Deux chiens jouent avec une balle rouge à côté de l'église.",
        "Qu'est-ce que c'est ?",
        "l'homme",
        "Ça m'a été très utile : « merci » !",
    ],
)
def test_round_trip(tokenizer: Tokenizer, text: str) -> None:
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_no_break_spaces_are_normalised(tokenizer: Tokenizer) -> None:
    assert tokenizer.decode(tokenizer.encode("bientôt\u202f!")) == "bientôt !"
    assert tokenizer.encode("rue\u00a0!") == tokenizer.encode("rue !")


def test_case_is_kept(tokenizer: Tokenizer) -> None:
    assert tokenizer.encode("The") != tokenizer.encode("the")


def test_special_ids_are_fixed(tokenizer: Tokenizer) -> None:
    assert (tokenizer.pad_id, tokenizer.start_id, tokenizer.end_id, tokenizer.unk_id) == (
        0,
        1,
        2,
        3,
    )
    for token_id, token in enumerate(
        [Tokenizer.PAD, Tokenizer.START, Tokenizer.END, Tokenizer.UNK]
    ):
        assert tokenizer.id_to_token(token_id) == token


def test_encode_adds_no_special_tokens(tokenizer: Tokenizer) -> None:
    ids = tokenizer.encode("What is it?")
    assert ids
    assert not {0, 1, 2} & set(ids)


def test_literal_special_token_text_is_not_a_control_id(tokenizer: Tokenizer) -> None:
    assert tokenizer.end_id not in tokenizer.encode("a </s> b")


def test_decode_stops_at_end_and_skips_pad_and_start(tokenizer: Tokenizer) -> None:
    ids = tokenizer.encode("What is it?")
    extra = tokenizer.encode("The man")
    padded = [tokenizer.start_id, *ids, tokenizer.end_id, *extra, 0, 0]
    assert tokenizer.decode(padded) == "What is it?"
    assert tokenizer.decode([tokenizer.start_id, *ids, 0, 0, 0]) == "What is it?"
    assert tokenizer.decode([tokenizer.end_id, *ids]) == ""


def test_batch_methods_match_single(tokenizer: Tokenizer) -> None:
    batch = tokenizer.encode_batch(FRENCH)
    assert batch == [tokenizer.encode(text) for text in FRENCH]
    assert tokenizer.decode_batch(batch) == [tokenizer.decode(ids) for ids in batch]


def test_save_load_round_trip(tokenizer: Tokenizer, tmp_path: Path) -> None:
    path = tmp_path / "tokenizer.json"
    tokenizer.save(path)
    loaded = Tokenizer.load(str(path))
    assert loaded.vocab_size == tokenizer.vocab_size
    assert loaded.encode_batch(CORPUS) == tokenizer.encode_batch(CORPUS)
    assert loaded.tokens("l'homme") == tokenizer.tokens("l'homme")
    assert loaded.end_id not in loaded.encode("a </s> b")


def test_atomic_save_leaves_no_temp_file(tokenizer: Tokenizer, tmp_path: Path) -> None:
    path = tmp_path / "tokenizer.json"
    tokenizer.save(path)
    tokenizer.save(path)  # overwriting goes through os.replace as well
    assert [p.name for p in tmp_path.iterdir()] == ["tokenizer.json"]


def test_load_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="missing.json"):
        Tokenizer.load(tmp_path / "missing.json")


@pytest.mark.parametrize("content", ["{not json", '{"version": "1.0"}', ""])
def test_load_corrupt_file_names_path(tmp_path: Path, content: str) -> None:
    path = tmp_path / "corrupt.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(ValueError) as info:
        Tokenizer.load(path)
    assert str(path) in str(info.value)


def test_unknown_character_maps_to_unk(tokenizer: Tokenizer) -> None:
    ids = tokenizer.encode("man €")
    assert tokenizer.unk_id in ids
    assert tokenizer.decode(ids) == "man <unk>"


def test_tokens_are_readable(tokenizer: Tokenizer) -> None:
    text = "Qu'est-ce que c'est ?"
    tokens = tokenizer.tokens(text)
    assert len(tokens) == len(tokenizer.encode(text))
    assert tokens[0].startswith("▁")
    assert "".join(tokens).replace("▁", " ").strip() == text
    assert [tokenizer.id_to_token(i) for i in tokenizer.encode(text)] == tokens


def test_id_to_token_out_of_range(tokenizer: Tokenizer) -> None:
    with pytest.raises(IndexError):
        tokenizer.id_to_token(tokenizer.vocab_size + 10)


def test_vocab_size_larger_than_data_supports() -> None:
    big = Tokenizer.train(CORPUS, vocab_size=100_000, min_frequency=1)
    assert 4 < big.vocab_size < 100_000
    assert big.decode(big.encode(FRENCH[2])) == FRENCH[2].replace("\u202f", " ")


def test_vocab_size_respected() -> None:
    assert Tokenizer.train(CORPUS, vocab_size=80).vocab_size <= 80


def test_train_accepts_a_generator() -> None:
    tok = Tokenizer.train((text for text in CORPUS), vocab_size=100)
    assert tok.decode(tok.encode("What is it?")) == "What is it?"


def test_vocab_size_too_small_raises() -> None:
    with pytest.raises(ValueError, match="vocab_size"):
        Tokenizer.train(CORPUS, vocab_size=10)
    with pytest.raises(ValueError, match="vocab_size"):
        Tokenizer.train(CORPUS, vocab_size=2)


@pytest.mark.parametrize("texts", [[], iter([]), ["", "   "]])
def test_empty_texts_raise(texts) -> None:
    with pytest.raises(ValueError, match="empty"):
        Tokenizer.train(texts)
