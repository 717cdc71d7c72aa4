"""Token positions for the position-based kinds: plain, per document, or randomized (Ruoss et al., ACL 2023).

Randomized positional encodings (arXiv 2305.16843) train on positions drawn as a sorted random subset of a range
[0, N) larger than the training length, so that the positions of longer test sequences were all seen in
training; evaluation and generation use the plain positions 0, 1, ..., or, with the option
``random_positions_at_eval``, draw them as the authors' code does (from a fixed seed). One draw serves every
layer of a forward (the model samples it, ``TransformerLM.drawn_positions``), and a packed or padded row maps each
document's own positions 0, 1, ... through its row's draw, so every document's positions are the first of the
row's sorted subset.
"""

from __future__ import annotations

import torch

from .masks import document_positions


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
