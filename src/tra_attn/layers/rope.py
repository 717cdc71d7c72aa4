"""RoPE attention: rotary position embedding on q and k (Su et al. 2021, arXiv 2104.09864).

    out_i = sum_{j <= i} softmax_j(R(i) q_i . R(j) k_j / sqrt(D)) v_j,   R(p) rotates channel pairs
                                                                           by p * base^(-2c/D)

Keys are cached after rotation. Runs on PyTorch SDPA. In a packed or padded batch each row's positions
count from its document's first real token (left padding shifts nothing), as if the document ran alone.
``random_positions`` N > 0 (randomized positional encodings, Ruoss et al., ACL 2023): training forwards (and
evaluation ones with ``random_positions_at_eval``) rotate by random positions, a sorted random subset of [0, N)
(ops/positions.py); with ``random_per_layer`` each layer draws its own, as the authors' randomized RoPE does
(``google-deepmind/randomized_positional_encodings``, ``models/transformer.py``: each layer's attention calls
``apply_rotary_encoding(..., noisy=True, rng=hk.next_rng_key())`` of ``models/positional_encodings.py``, one key
for its q and k; commit e8c64749d8cad7772dc7ade75b32ef9b2b29b466); without it (the former behaviour) one draw
serves every layer.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ops.causal import causal_sdpa
from ..ops.rope import apply_rope, rope_angles, rotate_new_positions
from .base import Attention
from .options import (
    RandomPositionsOptions,
    option,
    positive,
    random_positions_at_eval_option,
    random_positions_option,
)


@dataclass(frozen=True)
class RoPEOptions(RandomPositionsOptions):
    prefix = "rope"
    base: float = option(10000.0, "RoPE frequency base", positive)
    random_positions: int = random_positions_option()
    random_positions_at_eval: bool = random_positions_at_eval_option()
    random_per_layer: bool = option(
        True,
        "with random_positions: each layer draws its own positions, as the authors' code does; false: one draw "
        "for every layer",
    )


def check_even_head_dim(d_model: int, n_heads: int, what: str) -> None:
    """RoPE rotates pairs of channels: a ValueError unless the head dimension is even (``what``: for which option)."""
    if (d_model // n_heads) % 2:
        raise ValueError(
            f"d_model = {d_model!r}; expected an even head dimension d_model / n_heads = {d_model // n_heads} "
            f"for {what}"
        )


class RoPEAttention(Attention):
    Options = RoPEOptions

    @classmethod
    def check_options(cls, options, d_model: int, n_heads: int) -> None:
        check_even_head_dim(d_model, n_heads, "RoPE")

    def __init__(self, d_model: int, n_heads: int, **kwargs):
        super().__init__(d_model, n_heads, **kwargs)
        self.base = self.options.base

    def draws_per_layer(self) -> bool:
        """Each layer its own random positions with the option ``random_per_layer``."""
        return self.options.random_per_layer

    def attend(self, x, q, k, v, cache, segment_ids=None, positions=None):
        if positions is not None:  # given (drawn random positions): per row
            cos, sin = rope_angles(positions[:, None, -q.shape[-2] :], self.head_dim, self.base)
            q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        else:  # 0, 1, ... after the cached keys, or per document in a packed or padded batch
            q, k = rotate_new_positions(q, k, self.past_length(cache), segment_ids, self.base)
        k, v, _ = self.with_cache(cache, k, v)
        return causal_sdpa(q, k, v, logit_dropout=self.logit_dropout(), segment_ids=segment_ids)
