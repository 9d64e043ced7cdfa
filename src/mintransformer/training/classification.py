"""Training a text classifier: labelled texts -> tokenizer -> batches -> model -> loop.

`train` is what `mintransformer train classification` calls. The tokenizer is
trained on the training split only; each text becomes `<s>` + its tokens, cut to
`max_length` by the configured truncation. Optimisation is warm-up to a peak rate,
then Noam or linear decay, with Adam(0.9, 0.98, 1e-9) and cross-entropy. The loop
(`training.loop.train`) does the rest, and the test split is scored at the end.
"""

from __future__ import annotations

from pathlib import Path

import keras

from mintransformer.backend.runtime import batch_width_multiple
from mintransformer.config import ClassificationConfig
from mintransformer.data.batching import ClassificationBatches
from mintransformer.data.labelled import LabelSet, encode_texts, load_splits
from mintransformer.data.tokenizer import Tokenizer
from mintransformer.inference.classifier import Accuracy, Classifier
from mintransformer.models.classifier import TextClassifier
from mintransformer.training import loop
from mintransformer.training.optimizer import compile_for_training

Examples = list[tuple[str, str]]
Splits = dict[str, Examples]


def load_data(config: ClassificationConfig) -> Splits:
    """The splits of `config.data`; a new run's class names come from its training data.

    Raises:
        ValueError: if a split has a label outside the classes (a typo such as "Pos"
            for "pos" in a test file), before any run directory is written.
    """
    splits = load_splits(config.data, config.seed)
    if not config.labels:
        config.labels = LabelSet.from_labels([label for _, label in splits["train"]]).names
    check_labels(splits, LabelSet(config.labels), config.data)
    return splits


def check_labels(splits: Splits, labels: LabelSet, data: dict) -> None:
    """Refuses a split with a label `labels` does not know, naming its file."""
    for split, examples in splits.items():
        source = data.get(split) or f"the {split} split carved from {data['train']}"
        labels.ids([label for _, label in examples], source)


def describe(config: ClassificationConfig, splits: Splits) -> str:
    counts = ", ".join(f"{k} {len(v):,} texts" for k, v in splits.items())
    return f"data: {counts}; classes {config.labels}"


def make_batches(
    tokenizer: Tokenizer,
    examples: Examples,
    labels: LabelSet,
    config: ClassificationConfig,
    shuffle: bool,
    source: str,
) -> ClassificationBatches:
    """Length-bucketed `(token_ids, class_ids)` batches; `source` names the data in errors."""
    texts = [text for text, _ in examples]
    return ClassificationBatches(
        encode_texts(tokenizer, texts, config.max_length, config.truncation),
        labels.ids([label for _, label in examples], source),
        pad_id=tokenizer.pad_id,
        max_tokens=config.max_tokens,
        max_batch_size=config.max_batch_size,
        shuffle=shuffle,
        seed=config.seed,
        pad_multiple=batch_width_multiple(),
    )


def train_and_val_batches(tokenizer: Tokenizer, splits: Splits, config: ClassificationConfig):
    labels = LabelSet(config.labels)
    return (
        make_batches(tokenizer, splits["train"], labels, config, True, "the training data"),
        make_batches(tokenizer, splits["val"], labels, config, False, "the validation data"),
    )


def compile_model(model, config: ClassificationConfig, steps_per_epoch: int) -> keras.Model:
    """The warm-up Adam with cross-entropy over class logits, and accuracy."""
    # Divided by the sum of the sample weights: the padding rows of a data-parallel
    # batch (weight 0) then change neither the loss nor the accuracy.
    loss = keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction="mean_with_sample_weight"
    )
    return compile_for_training(model, config, steps_per_epoch, loss, weighted_metrics=["accuracy"])


def test_accuracy(
    model, tokenizer: Tokenizer, config: ClassificationConfig, splits: Splits, verbose: int
) -> Accuracy | None:
    """The accuracy on the test split, if there is one."""
    if "test" not in splits:
        return None
    classifier = Classifier.from_model(model, tokenizer, config)
    return classifier.accuracy(splits["test"], config.data["test"], progress=verbose > 0)


TASK = loop.Task(
    config_class=ClassificationConfig,
    load_data=load_data,
    describe=describe,
    tokenizer_texts=lambda splits, config: (text for text, _ in splits["train"]),
    tokenizer_options=lambda config: {
        "vocab_size": config.vocab_size,
        "lowercase": config.lowercase,
    },
    make_batches=train_and_val_batches,
    compile=compile_model,
    held_out=test_accuracy,
    held_out_label="test",
    weight_rows=True,
)


def train(
    path: str | Path, config: ClassificationConfig | None = None, **options
) -> tuple[TextClassifier, Tokenizer, Accuracy | None]:
    """Trains a new run in `path` with `config` (or resumes it), then scores its test split.

    `config.data` names the files: "train", "val" and "test" paths and "val_fraction";
    `options` are `loop.train`'s (`resume`, `overwrite`, `verbose`, `data_parallel`).

    Returns:
        the model, its tokenizer, and the accuracy on the test split (None without one).
    """
    trained = loop.train(TASK, path, config, **options)
    return trained.model, trained.tokenizer, trained.held_out
