"""Peer (c): PyTorch, eager. `torch.nn.Transformer` for translation, plain modules for config B.

The train step is `zero_grad`, forward and loss (under `torch.autocast(bfloat16)`
for bf16), `backward`, `Adam.step`; it runs on CUDA when torch sees a GPU, else CPU.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from contextlib import nullcontext

import torch
import torch.nn.functional as F
from torch import nn

from benchmarks.common import (
    PAD_ID,
    ClassifierShape,
    TranslationShape,
    classification_batch,
    translation_batch,
)


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def sinusoidal_table(length: int, d_model: int) -> torch.Tensor:
    """`(length, d_model)`: sin on even features, cos on odd ones."""
    positions = torch.arange(length, dtype=torch.float32)[:, None]
    rates = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float32) * -math.log(1e4) / d_model)
    table = torch.zeros(length, d_model)
    table[:, 0::2] = torch.sin(positions * rates)
    table[:, 1::2] = torch.cos(positions * rates)
    return table


class Translator(nn.Module):
    """Embeddings * sqrt(d_model) + sinusoidal positions, `nn.Transformer` (post-LN), Linear."""

    def __init__(self, shape: TranslationShape):
        super().__init__()
        d = shape.d_model
        self.scale = math.sqrt(d)
        self.source_embedding = nn.Embedding(shape.source_vocab, d)
        self.target_embedding = nn.Embedding(shape.target_vocab, d)
        length = max(shape.source_length, shape.target_length)
        self.register_buffer("positions", sinusoidal_table(length, d))
        self.dropout = nn.Dropout(shape.dropout)
        self.transformer = nn.Transformer(
            d_model=d,
            nhead=shape.num_heads,
            num_encoder_layers=shape.num_layers,
            num_decoder_layers=shape.num_layers,
            dim_feedforward=shape.dff,
            dropout=shape.dropout,
            layer_norm_eps=1e-6,
            batch_first=True,
        )
        self.projection = nn.Linear(d, shape.target_vocab)

    def embed(self, embedding: nn.Embedding, ids: torch.Tensor) -> torch.Tensor:
        return self.dropout(embedding(ids) * self.scale + self.positions[: ids.shape[1]])

    def forward(self, source: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        length = target.shape[1]
        causal = torch.ones(length, length, dtype=torch.bool, device=target.device).triu(1)
        hidden = self.transformer(
            self.embed(self.source_embedding, source),
            self.embed(self.target_embedding, target),
            tgt_mask=causal,
            src_key_padding_mask=source == PAD_ID,
            tgt_key_padding_mask=target == PAD_ID,
            memory_key_padding_mask=source == PAD_ID,
            tgt_is_causal=True,
        )
        return self.projection(hidden)


class Classifier(nn.Module):
    """Learned positions, post-LN encoder blocks (heads of width `key_dim`), masked mean
    pooling, Linear(hidden) + ReLU, Linear(1)."""

    def __init__(self, shape: ClassifierShape):
        super().__init__()
        d, width = shape.d_model, shape.num_heads * shape.key_dim
        self.shape = shape
        self.token_embedding = nn.Embedding(shape.vocab, d)
        self.position_embedding = nn.Embedding(shape.length, d)
        self.blocks = nn.ModuleList(
            nn.ModuleDict(
                {
                    "qkv": nn.Linear(d, 3 * width),
                    "out": nn.Linear(width, d),
                    "norm1": nn.LayerNorm(d, eps=1e-6),
                    "ffn": nn.Sequential(
                        nn.Linear(d, shape.dff), nn.ReLU(), nn.Linear(shape.dff, d)
                    ),
                    "norm2": nn.LayerNorm(d, eps=1e-6),
                }
            )
            for _ in range(shape.num_layers)
        )
        self.dropout = nn.Dropout(shape.dropout)
        self.hidden = nn.Linear(d, shape.hidden)
        self.output = nn.Linear(shape.hidden, 1)

    def attend(self, block: nn.ModuleDict, x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        heads, depth = self.shape.num_heads, self.shape.key_dim
        q, k, v = block["qkv"](x).view(batch, length, 3, heads, depth).permute(2, 0, 3, 1, 4)
        attended = F.scaled_dot_product_attention(
            q,
            k,
            v,
            attn_mask=keep[:, None, None, :],
            dropout_p=self.shape.dropout if self.training else 0.0,
        )
        return block["out"](attended.transpose(1, 2).reshape(batch, length, heads * depth))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        keep = ids != PAD_ID
        positions = torch.arange(ids.shape[1], device=ids.device)
        x = self.token_embedding(ids) + self.position_embedding(positions)
        for block in self.blocks:
            x = block["norm1"](x + self.dropout(self.attend(block, x, keep)))
            x = block["norm2"](x + self.dropout(block["ffn"](x)))
        real = keep.to(x.dtype)[:, :, None]
        pooled = (x * real).sum(1) / real.sum(1).clamp(min=1.0)
        hidden = self.dropout(F.relu(self.hidden(self.dropout(pooled))))
        return self.output(hidden)[:, 0]


def _runner(model: nn.Module, inputs: list, labels, loss_fn: Callable, precision: str):
    """One train step per call: zero_grad, forward + loss, backward, Adam step; returns loss."""
    where = device()
    model.to(where).train()
    inputs = [torch.as_tensor(array, device=where) for array in inputs]
    labels = torch.as_tensor(labels, device=where)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3, betas=(0.9, 0.98), eps=1e-9)

    def run() -> float:
        optimizer.zero_grad(set_to_none=True)
        autocast = (
            torch.autocast(where.type, dtype=torch.bfloat16)
            if precision == "bf16"
            else nullcontext()
        )
        with autocast:
            loss = loss_fn(model(*inputs).float(), labels)
        loss.backward()
        optimizer.step()
        return loss.item()

    return run


def translation_step(
    shape: TranslationShape, precision: str, label_smoothing: float = 0.1
) -> Callable[[], float]:
    """A runner of one train step of `nn.Transformer` on the fixed batch."""
    torch.manual_seed(0)
    source, target_in, labels = translation_batch(shape)

    def loss_fn(logits, labels):
        return F.cross_entropy(
            logits.reshape(-1, logits.shape[-1]),
            labels.reshape(-1).long(),
            ignore_index=PAD_ID,
            label_smoothing=label_smoothing,
        )

    return _runner(Translator(shape), [source, target_in], labels, loss_fn, precision)


def classification_step(shape: ClassifierShape, precision: str) -> Callable[[], float]:
    """A runner of one train step (binary cross-entropy) of the classifier on the fixed batch."""
    torch.manual_seed(0)
    ids, labels = classification_batch(shape)
    return _runner(
        Classifier(shape),
        [ids],
        labels.astype("float32"),
        F.binary_cross_entropy_with_logits,
        precision,
    )
