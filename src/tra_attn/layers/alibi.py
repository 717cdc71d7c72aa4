"""ALiBi attention (Press, Smith, Lewis, ICLR 2022, arXiv 2108.12409).

    out_i = sum_{j <= i} softmax_j(q_i . k_j / sqrt(D) - m_h (i - j)) v_j

with the standard fixed geometric slopes m_h (not learned). Runs on PyTorch SDPA with a float bias. In a
packed or padded batch, i and j are positions in the document (left padding shifts nothing).

``random_positions`` N > 0 (randomized positional encodings, Ruoss et al., ACL 2023): training forwards (and
evaluation ones with ``random_positions_at_eval``) draw, as the authors' randomized ALiBi does
(``google-deepmind/randomized_positional_encodings``, ``models/positional_encodings.py``,
``compute_noisy_alibi_encodings_biases``, called in each layer's attention of ``models/transformer.py`` with a key
of its own; commit e8c64749d8cad7772dc7ade75b32ef9b2b29b466), the distances: with ``random_distances`` a sorted
random subset d_1 < ... < d_{S-1} of [1, N) replaces the distances 1, ..., S - 1 (d_0 = 0), a fresh draw in each
layer, and the bias is -m_h d_{i-j}, still a function of i - j (ops/alibi.py, ops/positions.py). Without it
(the former behaviour), the bias is -m_h (p_i - p_j) with p the model's random positions in [0, N), one draw for
every layer. Each row of a batch draws its own distances; theirs draw one table for the whole batch (its bias has no
batch axis). ``self_offset`` 0.5 adds what their code adds to every earlier key (ops/alibi.py).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..ops.alibi import alibi_attention, alibi_slopes
from ..ops.positions import random_distances, random_positions
from .base import Attention
from .options import (
    RandomPositionsOptions,
    non_negative,
    option,
    random_positions_at_eval_option,
    random_positions_option,
)


@dataclass(frozen=True)
class ALiBiOptions(RandomPositionsOptions):
    prefix = "alibi"
    self_offset: float = option(
        0.0,
        "taken from the distance of every earlier key: -m (d - self_offset) (the randomized-ALiBi authors' code: "
        "0.5, in plain ALiBi too; under a causal mask a penalty of self_offset m on the query's own key); 0: the "
        "ALiBi paper's",
        non_negative,
    )
    random_positions: int = random_positions_option()
    random_positions_at_eval: bool = random_positions_at_eval_option()
    random_distances: bool = option(
        True,
        "with random_positions: randomize the distances as the authors' code does (a sorted random subset of "
        "[1, N) replaces 1, ..., S - 1, drawn anew in each layer); false: random positions p in [0, N), bias "
        "-m (p_i - p_j), one draw for every layer",
    )


class ALiBiAttention(Attention):
    Options = ALiBiOptions

    def __init__(self, d_model: int, n_heads: int, **kwargs):
        super().__init__(d_model, n_heads, **kwargs)
        self.register_buffer("slopes", alibi_slopes(n_heads), persistent=False)

    def position_draw(self):
        """Distance tables (``random_distances``) with the option ``random_distances``, else positions."""
        return random_distances if self.options.random_distances else random_positions

    def draws_per_layer(self) -> bool:
        """Random distances are drawn in each layer, as the authors draw them."""
        return self.options.random_distances

    def attend(self, x, q, k, v, cache, segment_ids=None, positions=None):
        k, v, _ = self.with_cache(cache, k, v)
        slopes, dropout = self.slopes, self.logit_dropout()
        drawn = {"distances" if self.options.random_distances else "positions": positions}
        return alibi_attention(
            q, k, v, slopes, logit_dropout=dropout, segment_ids=segment_ids, self_offset=self.options.self_offset,
            **drawn,
        )  # fmt: skip
