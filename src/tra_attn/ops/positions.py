"""Token positions for the position-based kinds: plain, per document, or randomized (Ruoss et al., ACL 2023).

Randomized positional encodings (arXiv 2305.16843) train on positions drawn as a sorted random subset of a range
[0, N) larger than the training length, so that the positions of longer test sequences were all seen in
training; evaluation and generation use the plain positions 0, 1, ..., or, with the option
``random_positions_at_eval``, draw them as the authors' code does, a fresh draw per sequence
(``sequence_positions``). Two draws, as the authors' code (``google-deepmind/randomized_positional_encodings``,
``models/positional_encodings.py`` and ``models/transformer.py``, commit e8c64749d8cad7772dc7ade75b32ef9b2b29b466)
has them:

- positions (``random_positions``): a sorted random subset of [0, N) replaces 0, 1, ..., S - 1 (their
  ``noisy_fixed_positional_encodings``, which their ``apply_rotary_encoding(noisy=True)`` uses for RoPE);
- distances (``random_distances``, their ``compute_noisy_alibi_encodings_biases`` for ALiBi): a sorted random
  subset d_1 < ... < d_{S-1} of [1, N) replaces the distances 1, ..., S - 1, and d_0 = 0, so a bias is still a
  function of i - j (d_{i-j}); a (B, S) table holds d_t at every token whose position in its document is t, and
  ``drawn_distances`` reads d_{p_i - p_j} for every query-key pair.

The model asks each layer for its draw (``Attention.position_draw``), once for every layer or once per layer
(``Attention.draws_per_layer``; the authors draw in each layer's attention, ``hk.next_rng_key()``), and passes
it as the layer's ``positions`` (``TransformerLM.drawn_positions``). In training a packed or padded row maps each
document's own positions 0, 1, ... through its row's draw, so every document takes the first entries of the
row's draw (the authors draw one for the whole batch; each row draws its own here). An evaluation draw is a
function of each document's tokens (and of the layer, for a per-layer draw) alone: a sequence gets the same draw
in any row of any batch, padded or packed beside others, as it gets alone.
"""

from __future__ import annotations

import hashlib

import torch

from .masks import document_positions
from .varlen import PADDING


def key_positions(sk: int, device=None, segment_ids=None, positions=None) -> torch.Tensor:
    """(B or 1, Sk) int64 position of every key (the queries are the last Sq): ``positions`` as given, else the
    position in its document (``segment_ids`` (B, Sk), ``masks.document_positions``), else 0, 1, ..., Sk - 1."""
    if positions is not None:
        return positions
    if segment_ids is not None:
        return document_positions(segment_ids)
    return torch.arange(sk, device=device)[None]


def _sorted_subset(batch: int, count: int, span: int, device, generator) -> torch.Tensor:
    """(batch, count) int64: per row a uniformly random sorted subset of ``count`` distinct integers of [0, span)."""
    scores = torch.rand(batch, span, device=device, generator=generator)
    return scores.topk(count, dim=-1, sorted=False).indices.sort(dim=-1).values


def random_positions(
    batch: int, length: int, span: int, device=None, segment_ids=None, generator: torch.Generator | None = None
) -> torch.Tensor:
    """(batch, length) int64 positions: per row a uniformly random sorted subset of ``length`` distinct integers of
    [0, span), drawn with ``generator`` (default torch's global one, so a checkpointed RNG state resumes training
    draws exactly). With ``segment_ids`` (batch, length) each token takes the entry of its row's subset at its
    position in its document: a document of n tokens gets the row's n smallest."""
    if length > span:
        raise ValueError(
            f"random_positions = {span}; expected at least the sequence length {length} (positions are "
            f"a sorted random subset of [0, random_positions))"
        )
    chosen = _sorted_subset(batch, length, span, device, generator)
    if segment_ids is None:
        return chosen
    return chosen.gather(-1, document_positions(segment_ids))


def random_distances(
    batch: int, length: int, span: int, device=None, segment_ids=None, generator: torch.Generator | None = None
) -> torch.Tensor:
    """(batch, length) int64 distance tables, the authors' randomized ALiBi distances: per row d_0 = 0 and
    d_1 < ... < d_{length-1} a uniformly random sorted subset of [1, span), which replace the distances 1, ...,
    length - 1 (a query reads d_{i-j} for key j: ``drawn_distances``). Drawn with ``generator`` as
    ``random_positions``; with ``segment_ids`` (batch, length) each token takes the entry of its row's table at
    its position in its document: a document of n tokens gets d_0, ..., d_{n-1} of its row."""
    if length > span:
        raise ValueError(
            f"random_positions = {span}; expected at least the sequence length {length} (distances 1, ..., "
            f"{length - 1} become a sorted random subset of [1, random_positions))"
        )
    chosen = _sorted_subset(batch, length - 1, span - 1, device, generator) + 1
    table = torch.cat([chosen.new_zeros(batch, 1), chosen], dim=-1)
    if segment_ids is None:
        return table
    return table.gather(-1, document_positions(segment_ids))


def drawn_distances(table: torch.Tensor, segment_ids: torch.Tensor | None, sq: int) -> torch.Tensor:
    """(B, Sq, Sk) int64 the drawn distance d_{p_i - p_j} of every query-key pair, for a ``table`` (B, Sk) of
    ``random_distances`` (or ``sequence_positions`` with that draw): the entry of the query's document at
    position p_i - p_j, p the positions in the documents of ``segment_ids`` (B, Sk) (None: 0, 1, ...; the
    queries are the last Sq keys). A document's real tokens are consecutive in the row's real tokens (padding
    may sit anywhere), so its entry t lies at rank (start rank + t) there. Pairs outside a document (masked) read
    an arbitrary entry."""
    sk = table.shape[-1]
    if segment_ids is None:
        rank = position = torch.arange(sk, device=table.device)[None]
        compacted = table
    else:
        real = segment_ids >= 0
        rank, position = real.cumsum(-1) - 1, document_positions(segment_ids)
        compacted = table.gather(-1, torch.argsort((~real).to(torch.int8), dim=-1, stable=True))  # real ones first
    index = (rank[:, sk - sq :, None] - position[:, None, :]).clamp(0, sk - 1)  # start rank + p_i - p_j
    b = max(table.shape[0], index.shape[0])
    return compacted.expand(b, sk).gather(-1, index.expand(b, sq, sk).reshape(b, sq * sk)).view(b, sq, sk)


def sequence_seed(tokens: torch.Tensor, layer: int | None = None) -> int:
    """A seed in [0, 2**63) that is a function of the token ids alone (BLAKE2 of their int64 bytes), and with
    ``layer`` of the layer too (BLAKE2's salt; layer 0's salt is all zeros, so its seed is the unsalted one)."""
    salt = b"" if layer is None else layer.to_bytes(16, "little")
    digest = hashlib.blake2b(tokens.to("cpu", torch.int64).numpy().tobytes(), digest_size=8, salt=salt).digest()
    return int.from_bytes(digest, "little") % (1 << 63)


def sequence_positions(
    input_ids: torch.Tensor,
    span: int,
    segment_ids: torch.Tensor | None = None,
    layer: int | None = None,
    draw=random_positions,
) -> torch.Tensor:
    """(B, S) int64 positions of an evaluation forward: each document (a row, or with ``segment_ids`` each contiguous
    run of one id, padding excluded) takes its own ``draw`` (``random_positions``: a uniformly random sorted subset
    of [0, span) of its length; ``random_distances``: its distance table), from a generator seeded by its tokens
    and, for a per-layer draw, by ``layer`` (``sequence_seed``): a fresh draw per sequence that no neighbour,
    padding or place in the batch changes. Padding positions are 0 (never read)."""
    b, s = input_ids.shape
    ids = input_ids.cpu()
    if segment_ids is None:
        real, document = torch.ones(b, s, dtype=torch.bool), torch.zeros(b, s, dtype=torch.long)
    else:
        segments = segment_ids.cpu()
        real = segments != PADDING
        starts = real & (document_positions(segments) == 0)
        document = starts.cumsum(-1)
    out = torch.zeros(b, s, dtype=torch.long)
    for r in range(b):
        for d in document[r][real[r]].unique().tolist():
            where = (real[r] & (document[r] == d)).nonzero().flatten()
            generator = torch.Generator().manual_seed(sequence_seed(ids[r, where], layer))
            out[r, where] = draw(1, where.numel(), span, generator=generator)[0]
    return out.to(input_ids.device)
