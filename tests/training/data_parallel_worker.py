"""One training process for test_data_parallel: trains a tiny run, prints its result as JSON.

    python -m tests.training.data_parallel_worker RUN_DIR TASK EPOCHS [DEVICES
        [COORDINATOR NUM_PROCESSES PROCESS_ID]] [--resume] [--pad-as N]

It prints the loss Keras logs after every step (the running mean of the epoch so
far). Keras weights that mean by each batch's rows, padding rows included, so a
run to compare with N devices pads its batches as for N devices (`--pad-as N`)
on one device.

The test starts it with KERAS_BACKEND=jax and, for several devices on a CPU,
XLA_FLAGS=--xla_force_host_platform_device_count=N, which must be set before
JAX starts: hence a process of its own.
"""

from __future__ import annotations

import json
import sys

import keras
import numpy as np

from mintransformer.backend.distribution import DataParallel
from mintransformer.config import ClassificationConfig, TranslationConfig
from mintransformer.data.corpora import numbers_spec
from mintransformer.training import classification, data_parallel, translation

# Dropout off, so that one device and several compute the same thing.
TINY_MODEL = dict(num_layers=1, d_model=32, num_heads=2, dff=64, dropout_rate=0.0)


def config_for(task: str, epochs: int, data_dir: str):
    if task == "translation":
        return TranslationConfig(
            data=numbers_spec(240, 40, 10),
            vocab_size=150,
            max_tokens=700,
            # Noam, warm-up within one epoch: the learning rate does not depend on the
            # number of epochs, so a 1-epoch run resumed for a 2nd steps as a 2-epoch run.
            schedule="noam",
            warmup_steps=4,
            max_length=40,
            average_last=1,
            epochs=epochs,
            **TINY_MODEL,
        )
    return ClassificationConfig(
        data={"train": f"{data_dir}/train.csv", "val": f"{data_dir}/val.csv"},
        vocab_size=120,
        max_tokens=400,
        max_length=24,
        warmup_steps=5,
        average_last=1,
        epochs=epochs,
        **TINY_MODEL,
    )


class StepLosses(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.losses = []

    def on_train_batch_end(self, batch, logs=None):
        self.losses.append(float(logs["loss"]))


def record_step_losses() -> StepLosses:
    """Adds a `StepLosses` to the callbacks of every `fit` of this process."""
    recorder = StepLosses()
    fit = keras.Model.fit

    def fit_recording(model, *args, callbacks=(), **kwargs):
        return fit(model, *args, callbacks=[*callbacks, recorder], **kwargs)

    keras.Model.fit = fit_recording
    return recorder


def main(argv: list[str]) -> None:
    resume = "--resume" in argv
    args = [a for a in argv if a != "--resume"]
    if "--pad-as" in args:
        at = args.index("--pad-as")
        shards = data_parallel.Shards(int(args[at + 1]), 1, 0)
        data_parallel.current_shards = lambda: shards
        del args[at : at + 2]
    recorder = record_step_losses()
    run_dir, task, epochs = args[0], args[1], int(args[2])
    parallel = None
    if len(args) > 3:
        devices = int(args[3])
        if len(args) > 4:
            parallel = DataParallel(devices, args[4], int(args[5]), int(args[6]))
        else:
            parallel = DataParallel(devices)
    config = None if resume else config_for(task, epochs, run_dir + ".data")
    trainer = translation if task == "translation" else classification
    model = trainer.train(run_dir, config, resume=resume, verbose=0, data_parallel=parallel)[0]
    weights = [np.asarray(w).astype("float64") for w in model.get_weights()]
    result = {"losses": recorder.losses, "weights": [w.ravel().tolist() for w in weights]}
    print(json.dumps(result))


if __name__ == "__main__":
    main(sys.argv[1:])
