"""Multi-head attention skeleton shared by every attention kind: projections, heads, KV cache."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import TYPE_CHECKING, ClassVar

import torch
from torch import nn

from ..ops.positions import random_positions
from ..utils.checks import is_int, is_number
from .block_parts import PARTS, KVShift, OutputGate
from .cache import LayerCache
from .options import KindOptions, NoOptions, RandomPositionsOptions

if TYPE_CHECKING:  # type hints only: the model config is data the layers read
    from ..models.config import ModelConfig


def check_sizes(d_model, n_heads, attention_dropout) -> None:
    """The layer arguments every kind shares, or a ValueError naming the argument."""
    for name, value in (("d_model", d_model), ("n_heads", n_heads)):
        if not is_int(value) or value <= 0:
            raise ValueError(f"{name} = {value!r}; expected a positive integer")
    if d_model % n_heads:
        raise ValueError(f"d_model = {d_model}; expected a multiple of n_heads = {n_heads}")
    ok = is_number(attention_dropout)
    if not (ok and 0.0 <= attention_dropout < 1.0):
        raise ValueError(f"attention_dropout = {attention_dropout!r}; expected a probability in [0, 1)")


class Attention(nn.Module):
    """Bias-free Q/K/V projections, an output projection with bias, and an ``attend`` hook.

    Built from plain arguments, so any model can use it: ``TRAAttention(d_model=256, n_heads=4,
    local_window=4)``; the keyword arguments beyond the shared ones are the kind's options (its ``Options``
    class, checked there and by ``check_options``). ``attention_dropout``: dropout on the pre-softmax logits
    in training; ``norm_eps``: the epsilon of any normalisation inside the layer; ``output_gate``, ``output_norm``
    and ``kv_shift``: the block parts every kind may have (``block_parts.py``).

    Subclasses implement ``attend(x, q, k, v, cache, segment_ids)`` on per-head tensors (B, H, S, Dh) of the
    new positions; with a cache they append their keys/values to it and attend over all of them.
    ``segment_ids`` (B, Sk), int32, describes a packed or padded batch: the document of every key (cached
    ones first), -1 on padding; the queries are the last S of them. A query attends only to real keys of its
    own document, and positions count from that document's start (docs/padding_and_packing.md). None: one
    document per row, no padding (the fast path). A kind whose ``attend(x, q, k, v, cache)`` takes no
    ``segment_ids`` still runs every batch without them, and refuses packed or padded ones clearly.
    A position-based kind may also take ``positions`` (B, Sk) int64, the position of every key (queries: the last
    S), or what else its ``position_draw`` draws, which the model passes in the forwards that draw (training, and
    evaluation with ``positions_drawn_at_eval``) when ``position_range`` asks for random positions; a kind whose
    ``attend`` takes no ``positions`` never receives them.
    """

    Options: ClassVar[type[KindOptions]] = NoOptions
    # The block parts (``block_parts.PARTS``) a kind has of its own: it refuses them as options of the block.
    own_block_parts: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def check_block_parts(cls, **parts: bool) -> None:
        """A ValueError naming the ModelConfig field of a block part this kind has of its own (its layer already
        gates, normalises or shifts: a second one would not be the part the comparison gives every method)."""
        for name, on in parts.items():
            if on and name in cls.own_block_parts:
                raise ValueError(
                    f"ModelConfig.{name} = True: {cls.__name__} has its own {name.replace('_', ' ')}; expected False"
                )

    @classmethod
    def check_options(cls, options: KindOptions, d_model: int, n_heads: int) -> None:
        """Refuse options this kind cannot honour at these sizes (a ValueError naming the option or size);
        the options class has checked each value already. Nothing by default; subclasses add theirs."""

    @classmethod
    def materializes(cls, options: KindOptions) -> bool:
        """Whether the layer with these options builds (B, H, S, S) tensors where its registry entry says it does
        not (``AttentionKind.materializes``); False by default."""
        return False

    @classmethod
    def shared_parameters(cls, options: KindOptions) -> tuple[str, ...]:
        """The names of the parameters that a model of these layers shares across its layers, as the kind's authors
        do (T5's one bias table): each layer builds its own, and the model then gives every layer the first
        layer's (``TransformerLM.tie_shared_parameters``); a layer built alone keeps its own. None by default."""
        return ()

    @classmethod
    def from_config(cls, config: ModelConfig) -> Attention:
        """The layer of a model configuration: its sizes, logit dropout, epsilon and attention options."""
        return cls(
            config.d_model,
            config.n_heads,
            attention_dropout=config.attention_dropout,
            norm_eps=config.norm_eps,
            **{part: getattr(config, part) for part in PARTS},
            **config.attention_options.to_dict(),
        )

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        attention_dropout: float = 0.0,
        norm_eps: float = 1e-6,
        output_gate: bool = False,
        output_norm: bool = False,
        kv_shift: bool = False,
        **options,
    ):
        super().__init__()
        check_sizes(d_model, n_heads, attention_dropout)
        self.check_block_parts(output_gate=output_gate, output_norm=output_norm, kv_shift=kv_shift)
        self.options = self.Options.from_dict(options, type(self).__name__)
        self.check_options(self.options, d_model, n_heads)
        self.n_heads = n_heads
        self.head_dim = d_model // n_heads
        self.norm_eps = norm_eps
        self.q_proj = nn.Linear(d_model, d_model, bias=False)
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model, bias=False)
        self.o_proj = nn.Linear(d_model, d_model, bias=True)
        self.attention_dropout = attention_dropout
        self.takes_segment_ids = "segment_ids" in inspect.signature(self.attend).parameters
        self.auxiliary_loss: torch.Tensor | None = None  # a training-only loss term a kind may set in its forward
        self.takes_positions = "positions" in inspect.signature(self.attend).parameters
        self.block_shift = KVShift(d_model, n_heads) if kv_shift else None
        gated = output_gate or output_norm
        self.block_output = OutputGate(d_model, n_heads, norm_eps, output_gate, output_norm) if gated else None

    def logit_dropout(self) -> float:
        """Dropout probability on the pre-softmax logits: ``attention_dropout`` in training, else 0."""
        return self.attention_dropout if self.training else 0.0

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        return x.view(b, s, self.n_heads, self.head_dim).transpose(1, 2)

    def forward(
        self,
        x: torch.Tensor,
        cache: LayerCache | None = None,
        segment_ids: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        q, k, v = (self.split_heads(proj(x)) for proj in (self.q_proj, self.k_proj, self.v_proj))
        if self.block_shift is not None:
            k, v = self.block_shift(x, k, v, cache, segment_ids)
        if positions is not None and self.takes_positions:
            out = self.attend(x, q, k, v, cache, segment_ids=segment_ids, positions=positions)
        elif segment_ids is None:
            out = self.attend(x, q, k, v, cache)
        elif self.takes_segment_ids:
            out = self.attend(x, q, k, v, cache, segment_ids)
        else:
            raise ValueError(
                f"{type(self).__name__}.attend(x, q, k, v, cache) takes no segment_ids; expected "
                "attend(x, q, k, v, cache, segment_ids=None) for a packed or padded batch (attention_mask with "
                "zeros, cu_seqlens or segment_ids)"
            )
        if self.block_output is not None:
            out = self.block_output(x, out)
        b, _, s, _ = out.shape
        return self.o_proj(out.transpose(1, 2).reshape(b, s, -1))

    def attend(self, x, q, k, v, cache: LayerCache | None, segment_ids: torch.Tensor | None = None) -> torch.Tensor:
        raise NotImplementedError

    @staticmethod
    def past_length(cache: LayerCache | None) -> int:
        return 0 if cache is None else cache.length

    @staticmethod
    def with_cache(cache: LayerCache | None, k, v, **extras):
        """All keys, values and extras: the cached ones followed by the new ones."""
        if cache is None:
            return k, v, extras
        return cache.update(k, v, **extras)

    def position_range(self) -> int:
        """N > 0 asks the model for training positions drawn from [0, N) by ``position_draw`` (randomized positional
        encodings; ``attend`` then receives them as ``positions``): the option ``random_positions`` of a kind whose
        options are ``RandomPositionsOptions``; 0 otherwise (plain positions)."""
        return self.options.random_positions if isinstance(self.options, RandomPositionsOptions) else 0

    def position_draw(self) -> Callable[..., torch.Tensor]:
        """How the model draws this layer's ``positions``: a function ``(batch, length, span, device, segment_ids,
        generator=None) -> (batch, length)`` int64 of ops/positions.py; ``random_positions`` (a sorted random subset
        of [0, N)) by default, a kind may draw something else (ALiBi's distance tables, ``random_distances``)."""
        return random_positions

    def draws_per_layer(self) -> bool:
        """True asks the model for a draw of its own in this layer (``position_draw`` again, as the randomized
        encodings' authors draw in each layer's attention); False (the default): one draw for every layer alike."""
        return False

    def positions_drawn_at_eval(self) -> bool:
        """True asks the model to draw positions (from ``position_range``) in evaluation forwards as well, as the
        randomized encodings' authors evaluate (the option ``random_positions_at_eval``); False otherwise:
        evaluation and generation use 0, 1, ..."""
        return isinstance(self.options, RandomPositionsOptions) and self.options.random_positions_at_eval

    def post_init(self) -> None:
        """Initialise parameters that the model's generic initialisation should not set (from the options)."""

    def on_train_step(self, step: int) -> None:
        """Called (through ``TransformerLM.set_train_step``) before the training forwards of optimizer step
        ``step``; nothing by default (TRA's threshold warm-up uses it)."""
