"""The training state in checkpoints: what a checkpoint holds, restoring the newest intact
one, and averaging the last ones into the run's final weights."""

from __future__ import annotations

import warnings
from pathlib import Path

from mintransformer.core.errors import CorruptFileError
from mintransformer.runs import checkpoints
from mintransformer.runs.directory import RunDirectory


def training_state(model) -> list:
    """Everything needed to continue training exactly: weights, seeds, optimizer slots."""
    weights = {id(v) for v in model.weights}
    seeds = [v for v in model.variables if id(v) not in weights]
    return list(model.weights) + seeds + list(model.optimizer.variables)


def restore_newest_intact(run: RunDirectory, state: list) -> Path | None:
    """Loads the newest checkpoint that reads back whole into `state`; returns its path.

    A corrupt checkpoint (empty, truncated) is skipped with a warning naming it, and
    renamed to `NAME.corrupt` so that neither averaging nor a later resume reads it;
    training then repeats the epochs after the checkpoint it restored. Returns None
    (training starts from the first epoch) if no checkpoint is intact.
    """
    skipped, restored = [], None
    for checkpoint in reversed(run.checkpoints()):
        try:
            checkpoints.load_variables(checkpoint, state)
        except CorruptFileError as err:
            checkpoint.replace(checkpoint.with_name(checkpoint.name + ".corrupt"))
            skipped.append(f"{checkpoint} ({err.problem}; kept as {checkpoint.name}.corrupt)")
            continue
        restored = checkpoint
        break
    if skipped:
        warnings.warn(
            f"skipped corrupt checkpoint {', '.join(skipped)}: "
            + (
                f"resuming from {restored.name}."
                if restored
                else "no intact checkpoint, training starts from the first epoch."
            ),
            stacklevel=2,
        )
    return restored


def average_into_result(run: RunDirectory, model, average_last: int) -> None:
    """Averages the newest `average_last` checkpoints into the model and `model.npz`."""
    newest = run.checkpoints()[-max(average_last, 1) :]
    weights = list(model.weights)
    arrays = checkpoints.average_checkpoints(newest)[: len(weights)]
    for variable, array in zip(weights, arrays, strict=True):
        variable.assign(array.astype(variable.dtype))
    checkpoints.save_variables(run.weights_path, weights)
