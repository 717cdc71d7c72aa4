"""The call contract of the TRA op's implementations: three small frozen objects, built and checked once.

``threshold_relative_attention`` (``dispatch.py``) takes plain keyword arguments, or these three objects in their
place (one form per part). It checks the call once, builds the objects not given and passes them by keyword to
whichever implementation it picks:

    impl(q, k, v, log_gate, *, scale, keep=KeepRule(...), documents=Documents(...), aids=TrainingAids(...))

- ``KeepRule``: which keys a query keeps, the threshold and the two windows (docs/op_contract.md, section 8);
- ``Documents``: which positions belong together, the segment ids of ``cu_seqlens``, ``key_padding_mask`` or
  ``segment_ids`` (section 9), and the per-query form the fast paths read (``segments.Segments``);
- ``TrainingAids``: what only training uses, the keep surrogate's temperature, the logit dropout and its seed
  (section 5).

Every implementation reads the keep rule from the one ``KeepRule``, so "kept" is decided identically
everywhere. An implementation that does not serve an aid refuses it by name (``TrainingAids.refuse``) rather
than ignoring it. A new op option is one field here, the implementations that honour it (the others refuse
it), and its tests (docs/op_contract.md, section 10).

Each object checks its fields when it is built: a bad value is a ValueError naming the op's argument, its value
and what was expected. The checks read metadata only (no host synchronisation; nothing breaks a compiled graph).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import NamedTuple

import torch

from ...utils.checks import check_declared, is_int, is_number, option
from ..varlen import segment_ids_from, segment_mask
from .dropout import LogitDropout, seed_tensor
from .segments import Segments, segments_of

WHO = "threshold_relative_attention"
_INTEGER_DTYPES = (torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)


def fail(argument: str, value, expected: str, who: str = WHO):
    raise ValueError(f"{who}: {argument} = {value}; expected {expected}")


def typed_repr(value) -> str:
    """A value as an error shows it: its repr, with the type when that is not a plain number."""
    return repr(value) if is_number(value) else f"{value!r} (a {type(value).__name__})"


def _below_inf(value) -> str | None:
    ok = is_number(value) and not math.isnan(value) and value != math.inf
    return None if ok else "a number below +inf (float('-inf') keeps every causal key)"


def _window(meaning: str):
    def check(value) -> str | None:
        return None if is_int(value) and value >= 0 else f"a non-negative integer (0: off; w > 0: {meaning})"

    return check


def _probability(value) -> str | None:
    ok = is_number(value) and 0 <= value < 1
    return None if ok else "a probability in [0, 1) (dropout on the logits in training)"


def _temperature(value) -> str | None:
    if is_number(value) and math.isfinite(value) and value >= 0:
        return None
    return "a finite temperature >= 0 (a sigmoid straight-through gradient for the keep decision; 0: off)"


def _seed(value) -> str | None:
    integer_tensor = isinstance(value, torch.Tensor) and value.dim() == 0 and value.dtype in _INTEGER_DTYPES
    ok = value is None or is_int(value) or integer_tensor
    return None if ok else "None, an integer or a 0-dim integer tensor (the logit dropout's mask)"


@dataclass(frozen=True)
class KeepRule:
    """Key j is kept for query i (d = i - j) iff 0 <= d, d < sliding_window (if > 0), and (s_ij > threshold or
    d < local_window), with s_ij the scaled score; docs/op_contract.md, sections 2 and 8. Documents narrow it
    further (``Documents``).

    threshold: a number below +inf; float('-inf') keeps every causal key. local_window: w >= 0, the w most
    recent keys are kept whatever their score (0: off). sliding_window: w >= 0, keys at d >= w are never kept
    (0: off).
    """

    threshold: float = option(0.0, "keys scoring above it are kept", _below_inf)
    local_window: int = option(0, "the w most recent keys always kept", _window("the w most recent keys always kept"))
    sliding_window: int = option(
        0, "only the w most recent keys can be kept", _window("only the w most recent keys can be kept")
    )

    def __post_init__(self):
        check_declared(self, prefix=f"{WHO}: ", shown=typed_repr)
        object.__setattr__(self, "threshold", float(self.threshold))

    @property
    def windows(self) -> tuple[int, int]:
        """(local_window, sliding_window)."""
        return self.local_window, self.sliding_window

    @property
    def thresholded(self) -> bool:
        """Whether the score decides anything: False for threshold -inf (every key the windows allow is kept)."""
        return self.threshold != -math.inf

    def replace(self, **changes) -> KeepRule:
        """This rule with some fields changed (checked again)."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True)
class Documents:
    """Which positions belong together: ``ids`` (B, Sk) int32 (another integer dtype is converted), the document
    of every key position (the KV cache included), negative for padding, documents contiguous (``ops/varlen.py``);
    None: one document per row, no padding (every implementation's fast path). A key is kept only if it is a real
    key of the query's document (docs/op_contract.md, section 9). ``of`` builds it from the op's three forms."""

    ids: torch.Tensor | None = None

    def __post_init__(self):
        ids = self.ids
        if ids is None:
            return
        if not (isinstance(ids, torch.Tensor) and ids.dim() == 2 and ids.dtype in _INTEGER_DTYPES):
            described = f"{type(ids).__name__} {getattr(ids, 'dtype', '')} {tuple(getattr(ids, 'shape', ()))}"
            fail("documents.ids", " ".join(described.split()), "None or a (B, Sk) integer tensor of segment ids")
        if ids.dtype != torch.int32:  # the form every implementation reads
            object.__setattr__(self, "ids", ids.to(torch.int32))

    @classmethod
    def of(
        cls,
        batch: int,
        keys: int,
        device,
        *,
        cu_seqlens=None,
        key_padding_mask=None,
        segment_ids=None,
        check_values: bool = True,
    ) -> Documents:
        """The documents of the op's ``cu_seqlens``, ``key_padding_mask`` and ``segment_ids`` (any may be None),
        checked (``ops/varlen.py: segment_ids_from``; ``check_values`` adds the checks that read the data)."""
        given = {"cu_seqlens": cu_seqlens, "key_padding_mask": key_padding_mask, "segment_ids": segment_ids}
        return cls(segment_ids_from(batch, keys, device, **given, check_values=check_values))

    @property
    def packed(self) -> bool:
        """Whether there are documents to respect (else every row is one document without padding)."""
        return self.ids is not None

    def segments(self, sq: int) -> Segments | None:
        """The per-key and per-query form the fast paths read, for queries at the last ``sq`` positions."""
        return segments_of(self.ids, sq)

    def mask(self, sq: int) -> torch.Tensor | None:
        """(B, 1, Sq, Sk) bool: query and key in one document, neither padding; None without documents."""
        return None if self.ids is None else segment_mask(self.ids, sq)


NO_DOCUMENTS = Documents()


@dataclass(frozen=True)
class TrainingAids:
    """What only training uses; all off by default (the exact op).

    keep_surrogate: temperature tau >= 0 of the sigmoid straight-through gradient for the keep decision
    (``surrogate.py``; 0: off). logit_dropout: probability p in [0, 1) of dropping each logit (``dropout.py``;
    0: off). dropout_seed: the dropout mask's seed, None, an integer or a 0-dim integer tensor; the dispatcher
    draws it once per call (``drawn``), so every implementation receives the same 0-dim int64 tensor.
    """

    keep_surrogate: float = option(0.0, "the keep surrogate's temperature (0: off)", _temperature)
    logit_dropout: float = option(0.0, "the probability of dropping each logit (0: off)", _probability)
    dropout_seed: int | torch.Tensor | None = option(None, "the dropout mask's seed (None: drawn)", _seed)

    def __post_init__(self):
        check_declared(self, prefix=f"{WHO}: ", shown=typed_repr)
        object.__setattr__(self, "logit_dropout", float(self.logit_dropout))
        object.__setattr__(self, "keep_surrogate", float(self.keep_surrogate))

    @property
    def active(self) -> bool:
        """Whether any aid is on."""
        return bool(self.keep_surrogate or self.logit_dropout)

    def drawn(self, device) -> TrainingAids:
        """These aids with the dropout's seed as a 0-dim int64 tensor on ``device``, drawn from torch's generator
        there when it is None; without dropout no seed (and nothing drawn)."""
        seed = seed_tensor(self.dropout_seed, device) if self.logit_dropout else None
        return dataclasses.replace(self, dropout_seed=seed)

    def surrogate_for(self, keep: KeepRule) -> float:
        """The surrogate's temperature under ``keep``: 0 without a threshold (every key the windows allow is kept,
        the sigmoid's slope is 0 there: nothing to relax)."""
        return self.keep_surrogate if keep.thresholded else 0.0

    def prepared(self, keep: KeepRule, q: torch.Tensor, keys: int) -> PreparedAids:
        """What the strip-wise paths (chunked, Triton) read for a call of ``q`` (B, H, Sq, D) against ``keys``
        keys: the surrogate's temperature under ``keep`` and this call's dropout, its row keys flattened to
        (B * H, Sq), or None without dropout (the seed already drawn: ``drawn``)."""
        dropout = None
        if self.logit_dropout:
            b, h, sq, _ = q.shape
            dropout = LogitDropout(self.logit_dropout, self.dropout_seed, b, h, sq, keys, q.device)
            dropout.rows = dropout.rows.reshape(b * h, sq).contiguous()
        return PreparedAids(self.surrogate_for(keep), dropout)

    def refuse(self, who: str, *names: str, reason: str = "") -> None:
        """A ValueError naming ``who`` and the first of the aids ``names`` that is on (not its default)."""
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        for name in names:
            value, default = getattr(self, name), defaults[name]
            if not (value is None if default is None else value == default):
                why = f" ({reason})" if reason else ""
                fail(f"aids.{name}", typed_repr(value), f"{default!r}: {who} does not serve it{why}", who=who)


NO_AIDS = TrainingAids()


class PreparedAids(NamedTuple):
    """A call's aids as the strip-wise paths read them (``TrainingAids.prepared``): the keep surrogate's
    temperature (0: off) and the logit dropout (None: off)."""

    tau: float = 0.0
    dropout: LogitDropout | None = None
