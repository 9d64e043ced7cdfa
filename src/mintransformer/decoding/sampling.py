"""Generating tokens with a `LanguageModel`: greedy, temperature, top-k and top-p sampling.

Prompts of different lengths share one batch in lock-step by position: at position
t, a row whose prompt is longer than t + 1 is fed its own next prompt token (what
it would have sampled is dropped), the other rows are fed what they sampled. So
every row sits at its true positions, nothing is padded, and prompts pass through
the same cached step as generated tokens, one position at a time.

The filtering (temperature, top-k, top-p) is done in NumPy on each step's logits,
drawing from a seeded `np.random.default_rng`, so a seed reproduces a sample on
every backend. The padding id is never generated: the model masks padded keys
and a generated pad would change what later positions see.

`generate` drives the start / step protocol of `steps.py`: `CachedLanguageModelSteps`
(the key/value cache) or `FullRecomputeLanguageModelSteps` (the whole model re-run on
the prefix, the reference). Each call compiles its step once (`tf.function`,
`jax.jit`, eager PyTorch) and reuses it for every position of that call.
`generate_with_steps` is its loop for any steps object: the ONNX engine's runs it
without Keras, which only `generate` imports.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np


def filter_logits(
    logits: np.ndarray, top_k: int | None = None, top_p: float | None = None
) -> np.ndarray:
    """Sets to -inf the logits outside the top k and outside the nucleus of mass top_p.

    Args:
        logits: float `(batch, vocab)`.
        top_k: keep the k largest logits of each row (ties with the k-th are kept too).
        top_p: keep the smallest set of most probable tokens whose probability
            (after `top_k`) reaches `top_p`; the most probable token is always kept.

    Returns:
        float64 `(batch, vocab)`.
    """
    logits = np.array(logits, dtype="float64")
    if top_k is not None and top_k < logits.shape[-1]:
        kth = np.partition(logits, -top_k, axis=-1)[:, -top_k, None]
        logits = np.where(logits >= kth, logits, -np.inf)
    if top_p is not None:
        probs = _softmax(logits)
        order = np.argsort(-probs, axis=-1, kind="stable")
        ranked = np.take_along_axis(probs, order, axis=-1)
        # Keep a token while the tokens ranked above it hold less than top_p.
        keep_ranked = np.cumsum(ranked, axis=-1) - ranked < top_p
        keep = np.zeros_like(keep_ranked)
        np.put_along_axis(keep, order, keep_ranked, axis=-1)
        logits = np.where(keep, logits, -np.inf)
    return logits


def next_tokens(
    logits: np.ndarray,
    rng: np.random.Generator,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
) -> np.ndarray:
    """Chooses one token per row: arg-max when `temperature` is 0, else a filtered sample.

    Args:
        logits: float `(batch, vocab)`.
        rng: the generator the samples are drawn from (one number per row).
        temperature: divides the logits before the softmax; 0 means greedy.
        top_k, top_p: as `filter_logits`.

    Returns:
        int32 `(batch,)`.
    """
    logits = np.asarray(logits, dtype="float64")
    if temperature == 0:
        return logits.argmax(-1).astype("int32")
    cdf = np.cumsum(_softmax(filter_logits(_tempered(logits, temperature), top_k, top_p)), -1)
    # Inverse CDF: the first token whose cumulative probability exceeds u (never a p = 0 one).
    u = rng.random(len(cdf))[:, None] * cdf[:, -1:]
    return np.minimum((cdf <= u).sum(-1), cdf.shape[-1] - 1).astype("int32")


def generate(model, prompt_ids: Sequence[Sequence[int]], *, cached: bool = True, **options):
    """Continues each prompt of a `LanguageModel` (`generate_with_steps` over its steps).

    Args:
        model: a built `LanguageModel`.
        prompt_ids: as `generate_with_steps`.
        cached: run one position per step with the key/value cache; False
            re-runs the whole model on the prefix at every step (the reference).
        **options: `max_new_tokens` (required), `end_id`, `temperature`, `top_k`, `top_p`,
            `seed`, as `generate_with_steps`.

    Returns:
        per row, the generated token ids (without the prompt).
    """
    from mintransformer.decoding.steps import (
        CachedLanguageModelSteps,
        FullRecomputeLanguageModelSteps,
    )

    steps_class = CachedLanguageModelSteps if cached else FullRecomputeLanguageModelSteps
    return generate_with_steps(
        lambda positions: steps_class(model, positions),
        prompt_ids,
        vocab_size=model.vocab_size,
        pad_id=model.config["pad_id"],
        max_length=model.max_length,
        **options,
    )


def generate_with_steps(
    make_steps: Callable[[int], object],
    prompt_ids: Sequence[Sequence[int]],
    *,
    vocab_size: int,
    pad_id: int | None,
    max_length: int,
    max_new_tokens: int,
    end_id: int | None = None,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    seed: int = 0,
    on_token: Callable[[int, int], None] | None = None,
) -> list[list[int]]:
    """Continues each prompt by up to `max_new_tokens` tokens.

    Args:
        make_steps: positions -> a language-model steps object with that many positions
            (`start(batch_size)`, `step` returning float logits `(n, vocab)`).
        prompt_ids: one non-empty list of token ids per row; lengths may differ.
        vocab_size, pad_id, max_length: the model's vocabulary, padding id and positions.
        max_new_tokens: most tokens to generate per row.
        end_id: a row stops after generating this id (it is included in the output).
        temperature: 0 for greedy decoding; higher is more random.
        top_k: sample only among the k most probable tokens.
        top_p: sample only from the nucleus of probability mass `top_p`.
        seed: seed of the `np.random.default_rng` the samples are drawn from.
        on_token: called as `on_token(row, token_id)` for each token as it is generated
            (to stream the output).

    Returns:
        per row, the generated token ids (without the prompt).

    Raises:
        ValueError: on an empty or padded prompt, ids outside the vocabulary,
            bad sampling options, or more positions than the model's `max_length`.
    """
    lengths = _check_prompts(prompt_ids, vocab_size, pad_id)
    _check_options(max_new_tokens, temperature, top_k, top_p)
    positions = int(lengths.max()) + max_new_tokens - 1
    if positions > max_length:
        raise ValueError(
            f"the longest prompt ({lengths.max()} tokens) plus max_new_tokens "
            f"({max_new_tokens}) needs {positions + 1} positions, but the model reads at "
            f"most max_length={max_length}: shorten the prompt or generate less."
        )
    batch = len(lengths)
    tokens = np.zeros((batch, positions + 1), "int32")
    for row, prompt in enumerate(prompt_ids):
        tokens[row, : lengths[row]] = prompt
    steps = make_steps(positions)
    state = steps.start(batch)
    rng = np.random.default_rng(seed)
    outputs: list[list[int]] = [[] for _ in range(batch)]
    done = np.zeros(batch, bool)
    for index in range(positions):
        logits, state = steps.step(tokens[:, index], index, state)
        logits = np.array(logits)  # a writable copy
        if pad_id is not None:
            logits[:, pad_id] = -np.inf
        chosen = next_tokens(logits, rng, temperature, top_k, top_p)
        generating = index + 1 >= lengths
        tokens[generating, index + 1] = chosen[generating]
        for row in np.flatnonzero(generating & ~done):
            outputs[row].append(int(chosen[row]))
            if on_token is not None:
                on_token(int(row), int(chosen[row]))
            done[row] = chosen[row] == end_id or len(outputs[row]) == max_new_tokens
        if done.all():
            break
    return outputs


def _tempered(logits: np.ndarray, temperature: float) -> np.ndarray:
    """`logits / temperature`, each row shifted so its largest logit is 0 first.

    The same distribution, but a tiny temperature sends the other logits to -inf
    rather than the largest to +inf (whose softmax, inf - inf, would be NaN and
    pick token 0, the padding id): it then samples the arg-max, as greedy does.
    """
    shifted = logits - logits.max(-1, keepdims=True)
    with np.errstate(over="ignore"):
        return shifted / temperature


def _softmax(logits: np.ndarray) -> np.ndarray:
    shifted = np.exp(logits - logits.max(-1, keepdims=True))
    return shifted / shifted.sum(-1, keepdims=True)


def _check_prompts(prompt_ids, vocab_size: int, pad_id: int) -> np.ndarray:
    """The prompt lengths `(batch,)`; ValueError for what the model cannot read."""
    if isinstance(prompt_ids, np.ndarray) and prompt_ids.ndim == 2:
        prompt_ids = prompt_ids.tolist()
    if not prompt_ids or isinstance(prompt_ids[0], int | np.integer):
        raise ValueError("`prompt_ids` must be a non-empty list of prompts (lists of ids).")
    for row, prompt in enumerate(prompt_ids):
        ids = np.asarray(prompt)
        if ids.ndim != 1 or len(ids) == 0:
            raise ValueError(f"prompt {row} is empty: each prompt needs at least one token id.")
        if not np.issubdtype(ids.dtype, np.integer) or ids.min() < 0 or ids.max() >= vocab_size:
            raise ValueError(f"prompt {row} has ids outside the vocabulary [0, {vocab_size}).")
        if (ids == pad_id).any():
            raise ValueError(f"prompt {row} contains the padding id {pad_id}.")
    return np.array([len(prompt) for prompt in prompt_ids])


def _check_options(max_new_tokens, temperature, top_k, top_p) -> None:
    if not isinstance(max_new_tokens, int | np.integer) or max_new_tokens < 1:
        raise ValueError(f"`max_new_tokens` must be a positive integer, got {max_new_tokens!r}.")
    if not (np.isfinite(temperature) and temperature >= 0):
        raise ValueError(f"`temperature` must be >= 0 (0 = greedy), got {temperature!r}.")
    if top_k is not None and (not isinstance(top_k, int | np.integer) or top_k < 1):
        raise ValueError(f"`top_k` must be a positive integer or None, got {top_k!r}.")
    if top_p is not None and not 0 < top_p <= 1:
        raise ValueError(f"`top_p` must be in (0, 1] or None, got {top_p!r}.")
