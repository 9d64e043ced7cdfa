"""Moved to `mintransformer.checkpoints`; this alias keeps old imports working."""

from mintransformer.checkpoints import (  # noqa: F401
    average_checkpoints,
    load_variables,
    read_arrays,
    save_variables,
)
from mintransformer.files import atomic_write  # noqa: F401
