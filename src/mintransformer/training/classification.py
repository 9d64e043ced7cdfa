"""Training a text classifier: labelled texts -> tokenizer -> batches -> model -> loop.

`train` is what `mintransformer train classification` calls. The tokenizer is
trained on the training split only; each text becomes `<s>` + its tokens, cut to
`max_length` by the configured truncation. Optimisation is warm-up to a peak rate,
then Noam or linear decay, with Adam(0.9, 0.98, 1e-9) and cross-entropy; the loop
(`training.loop.fit`) checkpoints, resumes and averages.
"""

from __future__ import annotations

from pathlib import Path

import keras

from mintransformer.backend_adapter import batch_width_multiple
from mintransformer.classification import Accuracy, Classifier
from mintransformer.config import ClassificationConfig
from mintransformer.data.batching import ClassificationBatches
from mintransformer.data.labelled import LabelSet, encode_texts, load_splits
from mintransformer.models.classifier import TextClassifier
from mintransformer.run import RunDirectory
from mintransformer.tokenizer import Tokenizer
from mintransformer.training import loop
from mintransformer.training.data_parallel import DataParallel, shard

Examples = list[tuple[str, str]]


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


def compile_for_training(model, config: ClassificationConfig, steps_per_epoch: int) -> keras.Model:
    """The loop's warm-up Adam with cross-entropy over class logits, and accuracy."""
    # Divided by the sum of the sample weights: the padding rows of a data-parallel
    # batch (weight 0) then change neither the loss nor the accuracy.
    loss = keras.losses.SparseCategoricalCrossentropy(
        from_logits=True, reduction="mean_with_sample_weight"
    )
    return loop.compile_for_training(model, config, steps_per_epoch, loss, ["accuracy"])


def train_classification(
    run: RunDirectory, splits: dict[str, Examples], resume: bool = False, verbose: int = 1
) -> tuple[TextClassifier, Tokenizer]:
    """Trains (or resumes) the run's classifier on `splits["train"]`, validating on "val".

    Returns:
        the model holding the final (averaged) weights, and the tokenizer.
    """
    config = loop.start(run, ClassificationConfig)
    labels = LabelSet(config.labels)
    texts = (text for text, _ in splits["train"])
    tokenizer = loop.prepare_tokenizer(
        run, texts, resume, vocab_size=config.vocab_size, lowercase=config.lowercase
    )
    train = make_batches(tokenizer, splits["train"], labels, config, True, "the training data")
    val = make_batches(tokenizer, splits["val"], labels, config, False, "the validation data")
    train, val = shard(train, val, tokenizer.pad_id, weight_rows=True)
    model = loop.build_and_fit(
        run, config, tokenizer, train, val, resume, verbose, compile_for_training
    )
    return model, tokenizer


def _load_data(config: ClassificationConfig) -> dict[str, Examples]:
    splits = load_splits(config.data, config.seed)
    if not config.labels:  # a new run: the classes come from the training data
        config.labels = LabelSet.from_labels([label for _, label in splits["train"]]).names
    return splits


def train(
    path: str | Path,
    config: ClassificationConfig | None = None,
    *,
    resume: bool = False,
    overwrite: bool = False,
    verbose: int = 1,
    data_parallel: DataParallel | None = None,
) -> tuple[TextClassifier, Tokenizer, Accuracy | None]:
    """Trains a new run in `path` with `config` (or resumes it), then scores its test split.

    `data_parallel` trains on several devices (JAX; `training.data_parallel`).

    `config.data` names the files: "train", "val" and "test" paths and "val_fraction".

    Returns:
        the model, its tokenizer, and the accuracy on the test split (None without one).
    """
    with loop.open_run(
        path, config, ClassificationConfig, resume, overwrite, _load_data, data_parallel
    ) as (run, config, splits):
        counts = ", ".join(f"{k} {len(v):,} texts" for k, v in splits.items())
        print(f"data: {counts}; classes {config.labels}")
        model, tokenizer = train_classification(run, splits, resume=resume, verbose=verbose)
    accuracy = None
    if "test" in splits:
        classifier = Classifier(model, tokenizer, config)
        accuracy = classifier.accuracy(splits["test"], config.data["test"], progress=verbose > 0)
    return model, tokenizer, accuracy
