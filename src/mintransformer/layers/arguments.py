"""A layer's constructor arguments: kept as attributes, passed on, and its `get_config()`.

Our layers store each constructor argument as an attribute of the same name
(`self.d_model = d_model`) and list those names in a class attribute
`ARGUMENTS`; the config is then Keras' base config plus those attributes, and
`from_config(config)` calls the constructor with the same arguments again.
"""

from __future__ import annotations

from collections.abc import Iterable

import keras


def constructor_arguments(local_values: dict) -> dict:
    """The arguments of an `__init__`, from `locals()` taken at its first line: every
    local but `self`, `kwargs` (Keras' own: name, dtype, ...) and `__class__`."""
    return {k: v for k, v in local_values.items() if k not in ("self", "kwargs", "__class__")}


def keep_arguments(layer: keras.layers.Layer, arguments: dict, names: Iterable[str]) -> None:
    """Sets `layer.<name> = arguments[name]` for each of `names`.

    Called with `constructor_arguments(locals())` from the top of `__init__`; those that need
    checking or converting are assigned again afterwards.
    """
    for name in names:
        setattr(layer, name, arguments[name])


def stored_arguments(layer: keras.layers.Layer, names: Iterable[str]) -> dict:
    """`{name: getattr(layer, name)}` for each of `names`, e.g. to build a sub-layer
    from the arguments of the layer that holds it (`Stack` passes its own to its blocks).
    """
    return {name: getattr(layer, name) for name in names}


def config_with(base_config: dict, layer: keras.layers.Layer, names: Iterable[str]) -> dict:
    """`base_config` plus `name: getattr(layer, name)` for each of `names`.

    Args:
        base_config: the config of the layer's base class (`super().get_config()`).
        layer: the layer whose config this is.
        names: constructor arguments that `layer` stores as attributes of the same name.

    Returns:
        a new dict, what `layer.get_config()` returns.
    """
    return {**base_config, **stored_arguments(layer, names)}
