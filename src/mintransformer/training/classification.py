"""Training a text classifier: labelled texts -> tokenizer -> length buckets -> fit -> run dir.

`train_classification` is what `mintransformer train classification` calls. The
tokenizer is trained on the training split only; each text becomes `<s>` + its
tokens, cut to `max_length` by the configured truncation. Optimisation is the
translation recipe (warm-up to a peak rate, then Noam or linear decay, with
Adam(0.9, 0.98, 1e-9)) with cross-entropy; checkpoints, exact resume and
averaging are `fit_run`'s.
"""

from __future__ import annotations

from collections.abc import Sequence

import keras
import numpy as np

from mintransformer.data.batching import ClassificationBatches
from mintransformer.data.labelled import LabelSet, truncate
from mintransformer.models.classifier import TextClassifier
from mintransformer.run import ClassificationConfig, RunDirectory
from mintransformer.tokenizer import Tokenizer
from mintransformer.training import checkpoints
from mintransformer.training.translation import fit_run, model_variables, warmup_adam


def build_model(config: ClassificationConfig, vocab_size: int) -> TextClassifier:
    """The `TextClassifier` a config describes, built and ready."""
    model = TextClassifier(
        config.num_layers,
        config.d_model,
        config.num_heads,
        config.dff,
        vocab_size,
        config.max_length,
        num_classes=len(config.labels),
        dropout_rate=config.dropout_rate,
        pad_id=Tokenizer.pad_id,
        pooling=config.pooling,
        hidden_units=config.hidden_units,
        key_dim=config.key_dim,
        ngram_buckets=config.ngram_buckets,
        ngram_dropout=config.ngram_dropout,
        dtype="mixed_bfloat16" if config.mixed_precision else None,
    )
    model(np.ones((1, 2), "int32"))
    return model


def encode_texts(tokenizer: Tokenizer, texts: Sequence[str], config) -> list[list[int]]:
    """`<s>` + the text's tokens, truncated to `config.max_length` in all."""
    return [
        [tokenizer.start_id, *truncate(ids, config.max_length - 1, config.truncation)]
        for ids in tokenizer.encode_batch(list(texts))
    ]


def make_batches(tokenizer, pairs, labels: LabelSet, config, shuffle: bool, source: str):
    token_ids = encode_texts(tokenizer, [text for text, _ in pairs], config)
    return ClassificationBatches(
        token_ids,
        labels.ids([label for _, label in pairs], source),
        pad_id=tokenizer.pad_id,
        max_tokens=config.max_tokens,
        max_batch_size=config.max_batch_size,
        shuffle=shuffle,
        seed=config.seed,
    )


def compile_for_training(model, config: ClassificationConfig, steps_per_epoch: int) -> None:
    """`warmup_adam` with cross-entropy and accuracy."""
    model.compile(
        optimizer=warmup_adam(config, steps_per_epoch),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=["accuracy"],
    )
    model.optimizer.build(model.trainable_variables)


def train_classification(
    run: RunDirectory,
    splits: dict[str, list[tuple[str, str]]],
    resume: bool = False,
    verbose: int = 1,
) -> tuple[TextClassifier, Tokenizer]:
    """Trains (or resumes) the run's classifier on `splits["train"]`, validating on "val".

    Returns:
        the model holding the final (averaged) weights, and the tokenizer.
    """
    config = run.config(ClassificationConfig)
    keras.utils.set_random_seed(config.seed)
    labels = LabelSet(config.labels)
    if resume and run.tokenizer_path.is_file():
        tokenizer = Tokenizer.load(run.tokenizer_path)
    else:
        tokenizer = Tokenizer.train(
            (text for text, _ in splits["train"]),
            vocab_size=config.vocab_size,
            lowercase=config.lowercase,
        )
        tokenizer.save(run.tokenizer_path)
    train = make_batches(tokenizer, splits["train"], labels, config, True, "the training data")
    val = make_batches(tokenizer, splits["val"], labels, config, False, "the validation data")
    model = build_model(config, tokenizer.vocab_size)
    compile_for_training(model, config, len(train))
    fit_run(run, model, train, val, config, resume, verbose)
    return model, tokenizer


def load_trained(run: RunDirectory) -> tuple[TextClassifier, Tokenizer, ClassificationConfig]:
    """The model (final weights), tokenizer and config of a finished run."""
    config = run.config(ClassificationConfig)
    tokenizer = Tokenizer.load(run.tokenizer_path)
    model = build_model(config, tokenizer.vocab_size)
    checkpoints.load_variables(run.weights_path, model_variables(model))
    return model, tokenizer, config
