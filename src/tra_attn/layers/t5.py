"""T5 relative position bias (Raffel et al., JMLR 2020, arXiv 1910.10683), unidirectional as in a decoder:

    out_i = sum_{j <= i} softmax_j(q_i . k_j / sqrt(D) + table[bucket(i - j), h]) v_j

with one learned scalar per head and per log-spaced distance bucket (ops/t5.py). The table is zero-initialised,
so the model starts as NoPE. Unlike T5 itself, the scores keep the usual 1/sqrt(D) scale (every kind here does).

``shared_table`` (the default): one table for all the layers of a model, as T5 has it: Mesh TensorFlow's
``SelfAttention(relative_attention_type="bias_shared")`` (tensorflow/mesh, commit
da907937e68aa421186f1178d71eb5f736fcb069, ``mesh_tensorflow/transformer/transformer_layers.py``: the variable is
cached in ``context.cache`` and reused by every layer), which T5's configs select (google-research/
text-to-text-transfer-transformer, commit e081111ccd51df425aa7124e8e311ed6d403d767, ``t5/models/gin/models/
bi_v1.gin``); Hugging Face transformers' ``T5Stack`` gives only layer 0 ``has_relative_attention_bias=True`` and
passes its ``position_bias`` to the others (``src/transformers/models/t5/modeling_t5.py``, 5.24.0 and commit
6b8b757dfcb582379a64f013cdce46c43629f2b0). ``shared_table=False``: a table per layer (this library's former kind).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..ops.t5 import t5_attention
from .base import Attention
from .options import (
    RandomPositionsOptions,
    option,
    positive_int,
    random_positions_at_eval_option,
    random_positions_option,
)


def at_least_two(value) -> str | None:
    return None if positive_int(value) is None and value >= 2 else "an integer >= 2"


@dataclass(frozen=True)
class T5Options(RandomPositionsOptions):
    prefix = "t5"
    num_buckets: int = option(32, "distance buckets: half exact, half log-spaced up to max_distance", at_least_two)
    max_distance: int = option(128, "distances from this one on share the last bucket", positive_int)
    shared_table: bool = option(True, "one bias table for all layers, as T5 (false: a table per layer)")
    random_positions: int = random_positions_option()
    random_positions_at_eval: bool = random_positions_at_eval_option()

    def check(self) -> None:
        super().check()
        exact = self.num_buckets // 2
        if self.max_distance <= exact:
            raise ValueError(
                f"{self.describe('max_distance')} = {self.max_distance}; expected more than num_buckets // 2 = {exact} "
                "(the distances with a bucket each)"
            )


class T5Attention(Attention):
    Options = T5Options

    @classmethod
    def shared_parameters(cls, options: T5Options) -> tuple[str, ...]:
        return ("relative_attention_bias",) if options.shared_table else ()

    def __init__(self, d_model: int, n_heads: int, **kwargs):
        super().__init__(d_model, n_heads, **kwargs)
        self.relative_attention_bias = nn.Parameter(torch.zeros(self.options.num_buckets, n_heads))

    def attend(self, x, q, k, v, cache, segment_ids=None, positions=None):
        k, v, _ = self.with_cache(cache, k, v)
        table = self.relative_attention_bias
        return t5_attention(
            q, k, v, table, self.options.num_buckets, self.options.max_distance, positions=positions,
            segment_ids=segment_ids, logit_dropout=self.logit_dropout(),
        )  # fmt: skip
