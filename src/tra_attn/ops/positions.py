"""Token positions for the position-based kinds: plain, per document, or randomized (Ruoss et al., ACL 2023).

Randomized positional encodings (arXiv 2305.16843) train on positions drawn as a sorted random subset of a range
[0, N) larger than the training length, so that the positions of longer test sequences were all seen in
training; evaluation and generation use the plain positions 0, 1, ..., or, with the option
``random_positions_at_eval``, draw them as the authors' code does, a fresh draw per sequence
(``sequence_positions``). One draw serves every layer of a forward (the model samples it,
``TransformerLM.drawn_positions``). In training a packed or padded row maps each document's own positions 0, 1,
... through its row's draw, so every document's positions are the first of the row's sorted subset. An evaluation
draw is a function of each document's tokens alone: a sequence gets the same positions in any row of any batch,
padded or packed beside others, as it gets alone.
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
    scores = torch.rand(batch, span, device=device, generator=generator)
    chosen = scores.topk(length, dim=-1, sorted=False).indices.sort(dim=-1).values
    if segment_ids is None:
        return chosen
    return chosen.gather(-1, document_positions(segment_ids))


def sequence_seed(tokens: torch.Tensor) -> int:
    """A seed in [0, 2**63) that is a function of the token ids alone (BLAKE2 of their int64 bytes)."""
    digest = hashlib.blake2b(tokens.to("cpu", torch.int64).numpy().tobytes(), digest_size=8).digest()
    return int.from_bytes(digest, "little") % (1 << 63)


def sequence_positions(input_ids: torch.Tensor, span: int, segment_ids: torch.Tensor | None = None) -> torch.Tensor:
    """(B, S) int64 positions of an evaluation forward: each document (a row, or with ``segment_ids`` each contiguous
    run of one id, padding excluded) takes a uniformly random sorted subset of [0, span) of its length, drawn from a
    generator seeded by its tokens (``sequence_seed``): a fresh draw per sequence that no neighbour, padding or
    place in the batch changes. Padding positions are 0 (never read)."""
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
            generator = torch.Generator().manual_seed(sequence_seed(ids[r, where]))
            out[r, where] = random_positions(1, where.numel(), span, generator=generator)[0]
    return out.to(input_ids.device)
