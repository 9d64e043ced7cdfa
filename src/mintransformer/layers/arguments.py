"""`config_with`: a layer's `get_config()` from the constructor arguments it keeps.

Our layers store each constructor argument as an attribute of the same name
(`self.d_model = d_model`) and list those names in a class attribute
`ARGUMENTS`; the config is then Keras' base config plus those attributes, and
`from_config(config)` calls the constructor with the same arguments again.
"""

from __future__ import annotations

from collections.abc import Iterable

import keras


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
