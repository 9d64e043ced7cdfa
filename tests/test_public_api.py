"""The public names resolve: every module imports, and every name it exports exists."""

import importlib
import pkgutil

import pytest

import mintransformer

pytestmark = pytest.mark.core

MODULES = sorted(
    info.name
    for info in pkgutil.walk_packages(mintransformer.__path__, prefix="mintransformer.")
    if info.name != "mintransformer.__main__"
)


@pytest.mark.parametrize("name", MODULES)
def test_every_module_imports_and_its_exported_names_exist(name):
    module = importlib.import_module(name)
    missing = [n for n in getattr(module, "__all__", []) if not hasattr(module, n)]
    assert not missing, f"{name} exports names it does not have: {missing}"


def test_the_top_level_names_resolve_to_the_classes_of_the_layout():
    for name in mintransformer.__all__:
        assert getattr(mintransformer, name) is not None
    from mintransformer.inference.translator import Translator
    from mintransformer.models.transformer import Transformer

    assert mintransformer.Translator is Translator
    assert mintransformer.MinTransformer is Transformer
    with pytest.raises(AttributeError, match="no attribute 'translate_everything'"):
        mintransformer.translate_everything  # noqa: B018


def test_the_top_level_keeps_four_modules_beside_the_packages():
    found = list(pkgutil.iter_modules(mintransformer.__path__))
    assert sorted(info.name for info in found if not info.ispkg) == [
        "__main__",
        "config",
        "reference",
        "viz",
    ]
    assert "cli" in {info.name for info in found if info.ispkg}
