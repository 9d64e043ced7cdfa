"""Our Hugging Face export (`hf_export`) -> a CTranslate2 model folder.

CTranslate2's own converter reads the folder, with loaders that follow what the model
holds rather than the conventions of published checkpoints, which do not hold here:

- its Marian loader starts decoding from a zero vector and drops the last vocabulary
  row (OPUS-MT's pad); our runs start from `<s>`'s embedding and their last row is a
  real token;
- its Pegasus loader reads `normalize_before`, which transformers 5's config lacks, and
  starts from the pad token.

Both loaders are replaced, for this conversion only, by its BART loader (the code
both derive from) with pre-LN set from the model type, no LayerNorm on the embeddings,
the vocabulary kept whole and decoding started from the config's
`decoder_start_token_id`. Needs `pip install ctranslate2`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from mintransformer.core.files import replacing_folder

# The files a CTranslate2 model folder holds: a folder of only these may be replaced.
CT2_FILES = frozenset(
    {"config.json", "model.bin", "vmap.txt"}
    | {
        f"{side}vocabulary.{ext}"
        for side in ("", "shared_", "source_", "target_")
        for ext in ("json", "txt")
    }
)


def _loaders() -> dict:
    """`{config class name: loader}` for our Marian and Pegasus exports."""
    from ctranslate2.converters import transformers as ct2

    class AsWritten(ct2.BartLoader):
        architecture = ""

        @property
        def architecture_name(self) -> str:
            return self.architecture

        def get_model_spec(self, model):
            model.config.normalize_before = model.config.model_type == "pegasus"
            model.config.normalize_embedding = False
            return super().get_model_spec(model)

    class Marian(AsWritten):
        architecture = "MarianMTModel"

    class Pegasus(AsWritten):
        architecture = "PegasusForConditionalGeneration"

    return {"MarianConfig": Marian(), "PegasusConfig": Pegasus()}


@contextlib.contextmanager
def _our_loaders() -> Iterator[None]:
    from ctranslate2.converters import transformers as ct2

    saved = dict(ct2._MODEL_LOADERS)
    ct2._MODEL_LOADERS.update(_loaders())
    try:
        yield
    finally:
        ct2._MODEL_LOADERS.clear()
        ct2._MODEL_LOADERS.update(saved)


def convert(hf_folder: str | Path, out: str | Path, quantization: str | None = None) -> Path:
    """Converts the folder `hf_export.export_run` wrote into a CTranslate2 model at `out`.

    Args:
        hf_folder: our Hugging Face export.
        out: the CTranslate2 model folder. An earlier CTranslate2 model there is replaced
            once the new one is complete; a folder holding anything else is refused.
        quantization: CTranslate2's weight type, e.g. "int8"; None keeps float32.

    Returns:
        `out`. Translate with `ctranslate2.Translator(out)`, on the token strings of the
        export's tokenizer (`</s>` appended).

    Raises:
        FileExistsError: `out` holds files that are not a CTranslate2 model's.
    """
    from ctranslate2.converters import TransformersConverter

    out = Path(out)
    with replacing_folder(out, CT2_FILES, "a CTranslate2 model") as staging, _our_loaders():
        # `force` lets the converter write into the empty staging folder (it would clear it).
        TransformersConverter(str(hf_folder)).convert(
            str(staging), quantization=quantization, force=True
        )
    return out
