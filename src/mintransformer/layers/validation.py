"""Moved to `mintransformer.checks`; this alias keeps old imports working."""

from mintransformer.checks import (  # noqa: F401
    dropout_rate,
    dtype_name,
    heads_divide,
    non_negative_int,
    one_of,
    positive_int,
    rank,
)
