"""The step API of decoding: scores of the next token, one position at a time.

A steps object wraps a model behind three NumPy-level calls, which every search's
Python loop is written against:

- `start(...) -> state`: the state before the first position;
- `step(tokens, index, state) -> (scores, state)`: feeds int `(n,)` tokens at
  position `index`, returns float `(n, vocab)` scores of the next token;
- `reorder(state, indices) -> state`: keeps (and repeats) the rows `indices`,
  as beam search does when it picks the parents of its new hypotheses;
- optionally `keep_rows(state, rows) -> state`: the whole state of those batch rows
  only, so that greedy search's Python loop stops decoding the rows that have ended.

Objects with `compiled_loops = True` also expose the same three calls on tensors
(`start_tensors`, `step_tensors`, `reorder_tensors`), `check_length`, and
`compiled_loop`, which compiles and caches a whole search: the searches in
`greedy.py` and `beam.py` then run their token loop as one `keras.ops.while_loop`
call instead of their Python loop. PyTorch compiles no while loop, so there the loop
runs in Python and calls its condition and body through `in_loop`, which traces them
into graphs once per shape (`backend.compilation.compile_eager_step`): the same search,
without Keras' per-layer Python on every token.

For a `Transformer` (scores are log-probabilities):

- `CachedSteps` keeps a key/value cache for decoder self-attention and computes the
  encoder output and its cross-attention keys/values once per source;
- `FullRecomputeSteps` re-runs the whole model on the growing prefix: the reference.

For a decoder-only `LanguageModel` (scores are float32 logits, which sampling needs):

- `CachedLanguageModelSteps`, with the model's key/value cache;
- `FullRecomputeLanguageModelSteps`, re-running the model on the prefix: the reference.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable, Hashable
from typing import Any, Protocol

import keras
import numpy as np
from keras import ops

from mintransformer.backend.compilation import compile_eager_step, compile_inference

State = Any


class Steps(Protocol):
    """What the Python loops of `greedy_search`, `beam_search` and `generate` call.

    An object without `compiled_loops` counts as `compiled_loops = False`.
    """

    compiled_loops: bool

    def start(self, *args, **kwargs) -> State: ...

    def step(self, tokens: np.ndarray, index: int, state: State) -> tuple[np.ndarray, State]: ...

    def reorder(self, state: State, indices: np.ndarray) -> State: ...


class _TensorSteps:
    """Steps with `compiled_loops`: a subclass writes `start_tensors`, `step_tensors`
    and `reorder_tensors` (traceable `keras.ops` code); this class gives the NumPy-level
    `step` and `reorder` on top of them, and `compiled_loop` for the searches."""

    compiled_loops = True

    def __init__(self, model, max_length: int):
        self.model = model
        self.max_length = max_length
        # Called once a search, outside its token loop: traced on PyTorch, like the loop's
        # body (`in_loop`).
        self.start_tensors = compile_eager_step(self.start_tensors, model.variables)
        self._step = compile_inference(
            compile_eager_step(self.step_tensors, model.variables), model.variables
        )
        self._loops: dict[Hashable, Callable] = {}
        self._in_loop: dict[Callable, Callable] = {}
        # A server compiles on one thread while it decodes on another: one compiled
        # function per key, whichever thread asks first.
        self._creating = threading.RLock()

    def start_tensors(self, *args):
        """The state before the first position."""
        raise NotImplementedError

    def step_tensors(self, tokens, index, state):
        """int `(n,)` tokens at int32 scalar `index` -> (scores `(n, vocab)`, state)."""
        raise NotImplementedError

    def reorder_tensors(self, state, rows):
        """Keeps the state's rows `rows` (int32 `(n,)`)."""
        raise NotImplementedError

    def step(self, tokens: np.ndarray, index: int, state: State) -> tuple[np.ndarray, State]:
        """`tokens` int `(n,)` at position `index` -> (scores `(n, vocab)`, new state)."""
        tokens = ops.convert_to_tensor(np.asarray(tokens, "int32"))
        scores, state = self._step(tokens, ops.convert_to_tensor(index, "int32"), state)
        return np.asarray(ops.convert_to_numpy(scores)), state

    def reorder(self, state: State, indices: np.ndarray) -> State:
        """Keeps the cache rows `indices` (beams are reordered within each source)."""
        return self.reorder_tensors(state, ops.convert_to_tensor(np.asarray(indices, "int32")))

    def check_length(self, max_length: int) -> None:
        """ValueError if a decode of `max_length` positions would not fit the cache."""
        if max_length > self.max_length:
            raise ValueError(f"`max_length` ({max_length}) exceeds the cache ({self.max_length}).")

    def in_loop(self, fn: Callable) -> Callable:
        """`fn(self, *args)` as a compiled loop calls it once per token, `fn` a function of
        tensors with no loop or branch on their values (a search's loop body).

        On TensorFlow and JAX the loop is compiled whole and `fn` runs as it is. On
        PyTorch the loop runs in Python, so `fn` is traced, once per shape, into a graph
        (`compile_eager_step`): its Keras layer calls then cost no Python per token.
        """
        with self._creating:
            if fn not in self._in_loop:
                bound = functools.partial(fn, self)
                self._in_loop[fn] = compile_eager_step(bound, self.model.variables)
            return self._in_loop[fn]

    def token_loop(
        self,
        goes_on: Callable,
        decode_one: Callable,
        loop_vars: tuple,
        goes_on_args: tuple = (),
        decode_args: tuple = (),
    ) -> tuple:
        """A search's token loop: `ops.while_loop` of `goes_on(self, *loop_vars,
        *goes_on_args)` and `decode_one(self, *loop_vars, *decode_args)` (functions as
        `in_loop` takes), returning the last loop variables.

        On PyTorch, where the loop runs in Python, each token is one traced call that
        decodes and then evaluates the condition on what it decoded, so the loop's
        Python reads one boolean a token and calls no second graph for it.
        """
        if keras.backend.backend() != "torch":
            return ops.while_loop(
                lambda *loop_vars: goes_on(self, *loop_vars, *goes_on_args),
                lambda *loop_vars: decode_one(self, *loop_vars, *decode_args),
                loop_vars,
            )
        key = (goes_on, decode_one)
        with self._creating:
            if key not in self._in_loop:

                def decode_then_check(steps, loop_vars, goes_on_args, decode_args):
                    loop_vars = decode_one(steps, *loop_vars, *decode_args)
                    return loop_vars, goes_on(steps, *loop_vars, *goes_on_args)

                self._in_loop[key] = self.in_loop(decode_then_check)
        going_on = self.in_loop(goes_on)(*loop_vars, *goes_on_args)
        while bool(going_on):
            loop_vars, going_on = self._in_loop[key](loop_vars, goes_on_args, decode_args)
        return tuple(loop_vars)

    def compiled_loop(self, key: Hashable, loop: Callable, jit_compile: bool = True) -> Callable:
        """`loop` compiled once per `key` for this model, with XLA on TensorFlow.

        XLA pays off for a whole decoding loop: its body is many small ops, run once
        per token (`compile_inference(..., jit_compile=True)`). Without `jit_compile`,
        a function of a few ops is traced once for many shapes instead of compiled
        per shape.
        """
        with self._creating:
            if key not in self._loops:
                self._loops[key] = compile_inference(loop, self.model.variables, jit_compile)
            return self._loops[key]


class CachedSteps(_TensorSteps):
    """Cached incremental decoding of a `Transformer`; scores are log-probabilities.

    The state is `(cache, cross_key_values, source_mask)`: the per-layer
    self-attention cache `(2, n, heads, max_length, depth)`, the per-layer
    cross-attention keys and values of the encoder output, and the bool source
    padding mask `(n, source_length)`.

    Args:
        model: a built `Transformer`.
        max_length: most target positions to decode (cache size).
        first_cache_length: the cache a compiled greedy decode starts on. Every step
            reads all of the cache's slots, so a decode on a cache of `max_length`
            pays for slots it never writes; most sentences end within 32 tokens, and
            the rows that do not carry on with the cache grown (`grow_cache_tensors`).
            Sources wider than it start on a cache of `max_length`.

    Attributes:
        source_positions: the longest source the model reads, `</s>` included.
    """

    def __init__(self, model, max_length: int, first_cache_length: int = 32):
        if max_length > model.decoder.max_length:
            raise ValueError(
                f"`max_length` ({max_length}) exceeds the model's target positions "
                f"(pe_target={model.decoder.max_length})."
            )
        if first_cache_length < 1:
            raise ValueError(f"`first_cache_length` must be >= 1, got {first_cache_length}.")
        super().__init__(model, max_length)
        self.first_cache_length = first_cache_length
        self.source_positions = model.encoder.max_length
        self._start = compile_inference(self.start_tensors, model.variables)

    def start_tensors(self, source_ids, cache_length: int | None = None):
        """int `(n, source_length)` -> the state before the first target position, with a
        cache of `cache_length` positions (default `max_length`)."""
        memory, source_mask = self.model.encode(source_ids)
        cache = self.model.decoder.empty_cache(
            ops.shape(source_ids)[0], cache_length or self.max_length
        )
        return cache, self.model.decoder.cross_key_values(memory), source_mask

    def cache_lengths(self, source_width: int, max_length: int) -> list[int]:
        """The cache lengths a compiled search of `max_length` positions moves through:
        `first_cache_length`, doubled while a search can need more, and the last all of
        the cache (`self.max_length`).

        Every step reads all of the cache's slots, so at a batch a step on 128 slots costs
        about twice one on 32 (docs/speed.md): a batch whose longest output needs 40 goes
        on with 64. A source wider than a length starts past it: a translation runs about
        as long as its source, so it would outgrow that length anyway, and a cache length
        skipped is a loop per shape not compiled.
        """
        lengths = [min(self.first_cache_length, self.max_length)]
        while lengths[-1] < self.max_length:
            lengths.append(min(2 * lengths[-1], self.max_length))
        lengths = [length for length in lengths if length >= source_width] or [self.max_length]
        needed = [length for length in lengths if length < max_length]
        return needed + [length for length in lengths if length >= max_length][:1]

    @staticmethod
    def cache_length(state):
        """The positions the state's self-attention cache holds."""
        return ops.shape(state[0][0])[3]

    @staticmethod
    def grow_cache_tensors(state, cache_length: int):
        """The state with its self-attention cache padded to `cache_length` positions."""
        cache, cross_key_values, source_mask = state
        grown = []
        for layer_cache in cache:
            extra = cache_length - ops.shape(layer_cache)[3]
            grown.append(ops.pad(layer_cache, [(0, 0), (0, 0), (0, 0), (0, extra), (0, 0)]))
        return tuple(grown), cross_key_values, source_mask

    def step_tensors(self, tokens, index, state):
        """int `(n,)` tokens at int scalar `index` -> (log-probs `(n, vocab)`, state)."""
        cache, cross_key_values, source_mask = state
        hidden, cache = self.model.decoder.step(
            tokens[:, None], index, cache, cross_key_values, source_mask
        )
        log_probs = self.model.next_token_log_probs(hidden)
        return log_probs, (cache, cross_key_values, source_mask)

    def reorder_tensors(self, state, rows):
        """Keeps the self-attention cache rows `rows` (int `(n,)`); the rest is per source
        and already repeated per beam."""
        cache, cross_key_values, source_mask = state
        return tuple(ops.take(c, rows, axis=1) for c in cache), cross_key_values, source_mask

    def keep_rows_tensors(self, state, rows):
        """The whole state of the batch rows `rows` (int `(n,)`) only: their cache,
        cross-attention keys/values and source mask (a search dropping finished rows)."""
        cache, cross_key_values, source_mask = state
        cache = tuple(ops.take(c, rows, axis=1) for c in cache)
        cross_key_values = [tuple(ops.take(t, rows, axis=0) for t in kv) for kv in cross_key_values]
        return cache, cross_key_values, ops.take(source_mask, rows, axis=0)

    def start(self, source_ids: np.ndarray, repeat: int = 1) -> State:
        """Encodes `(batch, length)` sources; each row repeated `repeat` times (beams)."""
        source_ids = np.repeat(np.asarray(source_ids, "int32"), repeat, axis=0)
        return self._start(ops.convert_to_tensor(source_ids))


class FullRecomputeSteps:
    """Re-runs the whole `Transformer` on the prefix each step (no cache): the reference.

    The model call is compiled like `CachedSteps`' steps, so that the benchmark's
    comparison measures the cache, not compiled against eager code. The state is
    `(source_ids, prefix)`, both int NumPy arrays.
    """

    compiled_loops = False

    def __init__(self, model, max_length: int):
        self.model = model
        self.max_length = max_length
        self._next_log_probs = compile_inference(self._next_log_probs_fn, model.variables)

    def _next_log_probs_fn(self, source_ids, prefix):
        hidden = self.model.hidden_states((source_ids, prefix), training=False)
        return self.model.next_token_log_probs(hidden[:, -1:])

    def start(self, source_ids: np.ndarray, repeat: int = 1) -> State:
        """The sources (each row repeated `repeat` times) and an empty prefix."""
        source_ids = np.repeat(np.asarray(source_ids, "int32"), repeat, axis=0)
        return source_ids, np.zeros((len(source_ids), 0), "int32")

    def step(self, tokens: np.ndarray, index: int, state: State) -> tuple[np.ndarray, State]:
        """`tokens` int `(n,)` at position `index` -> (log-probs `(n, vocab)`, new state)."""
        source_ids, prefix = state
        prefix = np.concatenate([prefix, np.asarray(tokens, "int32")[:, None]], axis=1)
        log_probs = self._next_log_probs(
            ops.convert_to_tensor(source_ids), ops.convert_to_tensor(prefix)
        )
        return np.asarray(ops.convert_to_numpy(log_probs)), (source_ids, prefix)

    def reorder(self, state: State, indices: np.ndarray) -> State:
        source_ids, prefix = state
        return source_ids, prefix[indices]


class CachedLanguageModelSteps(_TensorSteps):
    """Cached incremental decoding of a `LanguageModel`; scores are float32 logits.

    The state is the model's per-layer key/value cache `(2, n, heads, max_length, depth)`.

    Args:
        model: a built `LanguageModel`.
        max_length: most positions to decode (cache size).
    """

    def __init__(self, model, max_length: int):
        if max_length > model.max_length:
            raise ValueError(
                f"`max_length` ({max_length}) exceeds the model's max_length={model.max_length}."
            )
        super().__init__(model, max_length)

    def start_tensors(self, batch_size: int):
        """The empty cache of `batch_size` rows."""
        return self.model.empty_cache(batch_size, self.max_length)

    def step_tensors(self, tokens, index, state):
        """int `(n,)` tokens at int scalar `index` -> (logits `(n, vocab)`, state)."""
        return self.model.step(tokens[:, None], index, state)

    def reorder_tensors(self, state, rows):
        """Keeps the cache rows `rows` (int `(n,)`)."""
        return tuple(ops.take(c, rows, axis=1) for c in state)

    def start(self, batch_size: int, repeat: int = 1) -> State:
        """The empty cache of `batch_size * repeat` rows."""
        return self.start_tensors(batch_size * repeat)


class FullRecomputeLanguageModelSteps:
    """Re-runs the whole `LanguageModel` on the prefix each step (no cache): the reference.

    Reads only `model(token_ids, training=False)` and `model.variables`. The state
    is the prefix, an int NumPy array `(n, index)`.
    """

    compiled_loops = False

    def __init__(self, model, max_length: int):
        self.model = model
        self.max_length = max_length
        self._last_logits = compile_inference(
            lambda ids: model(ids, training=False)[:, -1], model.variables
        )

    def start(self, batch_size: int, repeat: int = 1) -> State:
        """An empty prefix of `batch_size * repeat` rows."""
        return np.zeros((batch_size * repeat, 0), "int32")

    def step(self, tokens: np.ndarray, index: int, state: State) -> tuple[np.ndarray, State]:
        """`tokens` int `(n,)` at position `index` -> (logits `(n, vocab)`, new state)."""
        prefix = np.concatenate([state, np.asarray(tokens, "int32")[:, None]], axis=1)
        logits = self._last_logits(ops.convert_to_tensor(prefix))
        return np.asarray(ops.convert_to_numpy(logits)), prefix

    def reorder(self, state: State, indices: np.ndarray) -> State:
        return state[indices]
