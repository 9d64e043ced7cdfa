"""The JSON bodies of the API, as pydantic models (they also write the OpenAPI page).

Requests are strict: unknown fields, values of the wrong type ("3" for 3, 1.5
for an int), and numbers that are not finite (NaN, Infinity) are refused with 422
rather than coerced. The per-request limits
(`limits.Limits`) are server flags, so they are checked in the endpoints, not here.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class _Request(BaseModel):
    # NaN and infinity (which Python's JSON reads) are refused as not finite, by name.
    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False)


class TranslateRequest(_Request):
    texts: list[str] = Field(
        min_length=1,
        description="Sentences to translate (at most --max-texts, each at most --max-chars).",
        examples=[["twenty-one"]],
    )
    beam_size: int = Field(1, ge=1, description="1: greedy; more: beam search (<= --max-beam).")
    alpha: float = Field(0.6, ge=0.0, le=10.0, description="Beam length-penalty exponent.")
    n_best: int = Field(1, ge=1, description="Hypotheses returned per text, best first.")
    attention: bool = Field(False, description="Also return every attention map of the result.")


class Hypothesis(BaseModel):
    translation: str
    score: float | None = Field(
        description="Length-normalised log-probability (beam search); null for greedy."
    )


class Attention(BaseModel):
    """Every attention map of one translation: `kind[layer][head][row][column]`."""

    source_tokens: list[str]
    input_tokens: list[str]
    output_tokens: list[str]
    encoder: list[list[list[list[float]]]] = Field(description="rows, columns: source tokens")
    decoder: list[list[list[list[float]]]] = Field(
        description="rows: output tokens, columns: input tokens"
    )
    cross: list[list[list[list[float]]]] = Field(
        description="rows: output tokens, columns: source tokens"
    )


class Translation(BaseModel):
    translation: str
    n_best: list[Hypothesis]
    attention: Attention | None = None


class TranslateResponse(BaseModel):
    results: list[Translation]


class ClassifyRequest(_Request):
    texts: list[str] = Field(min_length=1, examples=[["a good film"]])
    attention: bool = Field(False, description="Also return the encoder's attention per text.")


class InputAttention(BaseModel):
    tokens: list[str]
    encoder: list[list[list[list[float]]]] = Field(description="[layer][head][row][column]")


class Classification(BaseModel):
    label: str
    probabilities: dict[str, float]
    attention: InputAttention | None = None


class ClassifyResponse(BaseModel):
    results: list[Classification]


class GenerateRequest(_Request):
    prompt: str = Field("", description="Text to continue (at most --max-chars).")
    max_new_tokens: int = Field(
        50,
        ge=1,
        description="At most --max-new-tokens, and with the prompt's tokens at most the "
        "model's context.",
    )
    temperature: float = Field(0.8, ge=0.0, le=100.0, description="0: greedy.")
    top_k: int | None = Field(40, ge=1, description="Sample among the k most probable.")
    top_p: float | None = Field(0.95, gt=0.0, le=1.0, description="Nucleus probability mass.")
    seed: int = Field(0, ge=0, le=2**32 - 1)
    stream: bool = Field(
        True, description="Stream NDJSON lines, one per token, then a final line with the text."
    )


class GenerateResponse(BaseModel):
    text: str = Field(description="The prompt and its continuation (</s> as a line break).")
    tokens: list[str] = Field(description="The text each generated token added.")


class WarmUp(BaseModel):
    """The bucket shapes compiled so far in the background, of those to compile."""

    shapes_ready: int
    shapes: int


class Health(BaseModel):
    status: str
    task: str
    warm_up: WarmUp | None = None


class Problem(BaseModel):
    """Every 4xx answer: what was wrong, in words."""

    error: str
    detail: list | None = None
