"""Decoder-only transformer LM: token embedding -> N blocks -> RMSNorm -> untied output head.

Only the attention layer differs between methods (ModelConfig.attention), so every comparison
shares the rest of the model and the training harness. The model owns its loss: given labels it
returns the per-token cross-entropy, computed in chunks so full-vocabulary fp32 logits are never
built for the whole batch.
"""

from __future__ import annotations

import math
import os

import torch
import torch.nn.functional as F
from torch import nn

from ..layers import KVCache, LayerCache, attention_kind, check_model_config
from ..layers.norms import RMSNorm
from ..ops.positions import sequence_positions
from .config import ModelConfig
from .documents import forward_segment_ids
from .generation import generate
from .io import load_pretrained, save_pretrained
from .loss import token_cross_entropy
from .token_ids import INTEGER_DTYPES, as_index


class SwiGLU(nn.Module):
    """up: d -> 2h (two halves a, b); out = down(dropout(a * silu(b)))."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        hidden = config.mlp_width
        self.up = nn.Linear(config.d_model, 2 * hidden, bias=config.mlp_bias)
        self.down = nn.Linear(hidden, config.d_model, bias=config.mlp_bias)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.up(x).chunk(2, dim=-1)
        return self.down(self.dropout(a * F.silu(b)))


class Block(nn.Module):
    """One transformer block; ``prenorm``: x + f(norm(x)); ``paper``: x = norm(x); x = x + f(x)."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.style = config.block_style
        self.norm1 = RMSNorm(config.d_model, config.norm_eps)
        self.attn = attention_kind(config.attention).cls.from_config(config)
        self.norm2 = RMSNorm(config.d_model, config.norm_eps)
        self.mlp = SwiGLU(config)
        self.dropout = nn.Dropout(config.dropout if config.residual_dropout else 0.0)

    def forward(
        self,
        x: torch.Tensor,
        cache: LayerCache | None = None,
        segment_ids: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if self.style == "paper":
            x = self.norm1(x)
            x = x + self.dropout(self.attn(x, cache, segment_ids, positions))
            x = self.norm2(x)
            return x + self.dropout(self.mlp(x))
        x = x + self.dropout(self.attn(self.norm1(x), cache, segment_ids, positions))
        return x + self.dropout(self.mlp(self.norm2(x)))


def _without_shared_aliases(model, state_dict, prefix, local_metadata) -> None:
    """State-dict hook: each parameter shared across layers once, under its first name."""
    for alias in model.shared_aliases():
        state_dict.pop(prefix + alias, None)


def _with_shared_aliases(model, state_dict, prefix, local_metadata, strict, missing, unexpected, errors) -> None:
    """Load hook: the further names of a shared parameter read its first name's tensor; a state dict that gives one
    of them another value (the weights of a model without sharing) is an error."""
    for alias, name in model.shared_aliases().items():
        if prefix + name not in state_dict:
            continue
        given = state_dict.get(prefix + alias)
        if given is not None and not torch.equal(given, state_dict[prefix + name]):
            errors.append(
                f"{prefix + alias}: a parameter this model shares with {prefix + name} (one tensor for every layer), "
                "given another value; expected the weights of a model that shares it"
            )
        state_dict[prefix + alias] = state_dict[prefix + name]


def _retie(model, incompatible_keys) -> None:
    """Load hook: a load with ``assign`` gave each name its own tensor; the layers share the first one again."""
    model.tie_shared_parameters()


class TransformerLM(nn.Module):
    """``model(input_ids) -> logits (B, S, vocab)``; ``model(input_ids, labels=labels) -> loss (B, S)``."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        check_model_config(config)
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.dropout = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = RMSNorm(config.d_model, config.norm_eps)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.tie_shared_parameters()
        self.register_state_dict_post_hook(_without_shared_aliases)
        self.register_load_state_dict_pre_hook(_with_shared_aliases)
        self.register_load_state_dict_post_hook(_retie)
        self.reset_parameters()

    def tie_shared_parameters(self) -> None:
        """Give every layer the first layer's parameters that its attention kind shares across layers
        (``Attention.shared_parameters``: one tensor, one gradient, the sum of every layer's, one optimizer entry).
        Called when the model is built, and again after a load that assigned new tensors (``load_state_dict`` with
        ``assign``, transformers' loader). The state dict holds each shared tensor once, under its first name
        (safetensors refuses tensors that share memory); loading fills the other names from it."""
        first = self.blocks[0].attn
        for name in type(first).shared_parameters(first.options):
            for block in self.blocks[1:]:
                setattr(block.attn, name, getattr(first, name))

    def shared_aliases(self) -> dict[str, str]:
        """{name: the first name of the same parameter} for every further name of a parameter held under several
        (``tie_shared_parameters``); empty when no parameter is shared."""
        first: dict[int, str] = {}
        aliases = {}
        for name, param in self.named_parameters(remove_duplicate=False):
            if id(param) in first:
                aliases[name] = first[id(param)]
            else:
                first[id(param)] = name
        return aliases

    def reset_parameters(self) -> None:
        """``init_scheme`` "normal", GPT-2 style: N(0, init_std) weights, zero biases, residual outputs scaled
        by 1/sqrt(2 N). "notebook", the TRA authors': PyTorch's default initialisation of every layer, except
        the embedding from U(-0.01, 0.01) and the output head from N(0, 0.02). Under both, each attention layer's
        own ``post_init`` then sets what its options say (a gate's bias, a kind's scalars)."""
        if self.config.init_scheme == "notebook":
            for module in self.modules():
                if isinstance(module, (nn.Linear, nn.Embedding)):
                    module.reset_parameters()
            nn.init.uniform_(self.embed.weight, -0.01, 0.01)
            nn.init.normal_(self.lm_head.weight, std=0.02)
        else:
            std = self.config.init_std
            for module in self.modules():
                if isinstance(module, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(module.weight, std=std)
                if isinstance(module, nn.Linear) and module.bias is not None:
                    nn.init.zeros_(module.bias)
            for block in self.blocks:
                for proj in (block.attn.o_proj, block.mlp.down):
                    nn.init.normal_(proj.weight, std=std / math.sqrt(2 * self.config.n_layers))
        for block in self.blocks:
            block.attn.post_init()

    def auxiliary_loss(self) -> torch.Tensor | None:
        """The sum of the loss terms the attention layers set in the last training forward (a kind's regulariser),
        or None when none did; the training loop adds it to the task's loss."""
        terms = [block.attn.auxiliary_loss for block in self.blocks if block.attn.auxiliary_loss is not None]
        return torch.stack(terms).sum() if terms else None

    def set_train_step(self, step: int) -> None:
        """Before the training forwards of optimizer step ``step``: every submodule with an ``on_train_step``
        hook learns the step (TRA's threshold warm-up). Evaluation forwards are not affected."""
        for module in self.modules():
            hook = getattr(module, "on_train_step", None)
            if hook is not None:
                hook(step)

    def hidden_states(
        self,
        input_ids: torch.Tensor,
        cache: KVCache | None = None,
        attention_mask: torch.Tensor | None = None,
        cu_seqlens: torch.Tensor | None = None,
        segment_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Final normalised hidden states (B, S, d_model), before the output head (arguments: ``forward``)."""
        return self.hidden_states_and_segments(input_ids, cache, attention_mask, cu_seqlens, segment_ids)[0]

    def hidden_states_and_segments(
        self, input_ids, cache=None, attention_mask=None, cu_seqlens=None, segment_ids=None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The hidden states and the (B, S) segment ids of the new tokens (None: one document per row), which
        say which labels a loss ignores (``models.loss.outside_documents``); arguments as for ``forward``."""
        self._check_shape(input_ids)
        keys = forward_segment_ids(input_ids, cache, attention_mask, cu_seqlens, segment_ids)
        if attention_mask is not None:  # the ids under padding are never read: any pad id will do
            input_ids = input_ids.masked_fill(attention_mask == 0, 0)
        x = self.dropout(self.embed(as_index(input_ids)))
        drawn = self.drawn_positions(input_ids, keys, cache)
        for i, block in enumerate(self.blocks):
            x = block(x, None if cache is None else cache[i], keys, drawn[i])
        return self.norm(x), None if keys is None else keys[:, -input_ids.shape[1] :]

    def drawn_positions(
        self, input_ids: torch.Tensor, segment_ids: torch.Tensor | None, cache: KVCache | None
    ) -> list[torch.Tensor | None]:
        """The (B, S) positions each layer receives when its attention asks for random ones (one entry per block,
        in order; None: plain positions): what the layer's ``Attention.position_draw`` draws from
        ``position_range``, one draw shared by the layers that share (the same tensor), a draw of its own for
        each layer that ``draws_per_layer`` (ops/positions.py). Training draws with torch's global generator, layer
        by layer; an evaluation forward draws only if asked (``draws_positions_at_eval``), a fresh draw per
        sequence seeded by its tokens (and, per layer, by the layer's index: ``sequence_positions``), so
        evaluation is deterministic and each sequence is scored as it is alone; such a model decodes without a KV
        cache (``generate`` does so by itself)."""
        plain: list[torch.Tensor | None] = [None] * len(self.blocks)
        if not any(block.attn.position_range() for block in self.blocks) or (self.training and cache is not None):
            return plain
        if not self.training:
            if not self.draws_positions_at_eval:
                return plain
            if cache is not None:
                raise ValueError(
                    "random_positions_at_eval: a forward with a KV cache; expected none (positions drawn per "
                    "forward cannot continue across decoding steps): evaluate or generate without a cache"
                )
        drawn, shared = [], None
        for layer, block in enumerate(self.blocks):
            span, own = block.attn.position_range(), block.attn.draws_per_layer()
            if not span or (shared is not None and not own):
                drawn.append(shared if span else None)
                continue
            draw = block.attn.position_draw()
            if self.training:
                positions = draw(*input_ids.shape, span, input_ids.device, segment_ids)
            else:
                positions = sequence_positions(input_ids, span, segment_ids, layer if own else None, draw)
            shared = shared if own else positions
            drawn.append(positions)
        return drawn

    @property
    def draws_positions_at_eval(self) -> bool:
        """Whether evaluation forwards draw random positions (``random_positions_at_eval``): each forward sees a
        sequence whole, so such a model decodes by full forwards, never with a KV cache."""
        return any(block.attn.positions_drawn_at_eval() for block in self.blocks)

    def forward(
        self,
        input_ids: torch.Tensor,
        labels: torch.Tensor | None = None,
        cache: KVCache | None = None,
        attention_mask: torch.Tensor | None = None,
        cu_seqlens: torch.Tensor | None = None,
        segment_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Logits (B, S, vocab); with ``labels`` (B, S) instead the per-token fp32 loss (B, S), 0 where a
        label is -100. Token ids are not range-checked here (a host sync per call): data sources and
        ``generate`` check them once with ``check_input_ids``.

        A variable-length batch (docs/padding_and_packing.md), in one of three forms: ``attention_mask`` (B, S),
        1 for a token and 0 for padding (left or right padding only: padding between real tokens is an error);
        ``cu_seqlens`` (N+1,) int32 offsets of N documents packed in one row (B = 1); ``segment_ids`` (B, S),
        the document of each token, documents packed per row (contiguous, non-decreasing ids; negative:
        padding). A mask combines with either of the others. Every row of every document then computes what
        the document alone computes, and ``labels[:, i]`` (the target of position i, the token at i + 1) is
        ignored where position i is padding or the token at i + 1 is padding or in another document. With a
        ``cache`` these describe the new tokens only; without them new tokens continue each row's last
        document. The checks read the data (a host synchronisation), once per forward.
        """
        hidden, segments = self.hidden_states_and_segments(input_ids, cache, attention_mask, cu_seqlens, segment_ids)
        if labels is None:
            return self.lm_head(hidden)
        return token_cross_entropy(hidden, self.lm_head, labels, segments)

    def _check_shape(self, input_ids) -> None:
        if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
            shape = tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__
            raise ValueError(f"TransformerLM: input_ids shape = {shape}; expected a 2-d (batch, seq) tensor")
        if input_ids.dtype not in INTEGER_DTYPES:
            raise ValueError(
                f"TransformerLM: input_ids.dtype = {input_ids.dtype}; expected an integer dtype of token ids "
                f"({', '.join(str(d).removeprefix('torch.') for d in INTEGER_DTYPES)})"
            )
        if input_ids.shape[0] == 0 or input_ids.shape[1] == 0:
            raise ValueError(
                f"TransformerLM: input_ids shape = {tuple(input_ids.shape)}; expected at least one sequence "
                "of at least one token"
            )

    def check_input_ids(self, input_ids, attention_mask=None) -> None:
        """Shape, dtype and id range of a batch of token ids (syncs with the device: call it at data boundaries).
        The ids under an ``attention_mask``'s padding are not checked: the forward never reads them."""
        self._check_shape(input_ids)
        if isinstance(attention_mask, torch.Tensor) and attention_mask.shape == input_ids.shape:
            input_ids = input_ids.masked_fill(attention_mask == 0, 0)
        low, high = int(input_ids.min()), int(input_ids.max())
        if low < 0 or high >= self.config.vocab_size:
            raise ValueError(
                f"TransformerLM: token ids span [{low}, {high}]; expected ids in [0, {self.config.vocab_size})"
            )

    def num_parameters(self) -> int:
        """The number of weights; a parameter shared across layers counts once."""
        return sum(p.numel() for p in self.parameters())

    def new_cache(self, capacity: int = 0) -> KVCache:
        """An empty KV cache; ``capacity`` preallocates that many positions per layer."""
        return KVCache(self.config.n_layers, capacity)

    def generate(
        self,
        input_ids: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        use_cache: bool = True,
        generator: torch.Generator | None = None,
        attention_mask: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Append ``max_new_tokens`` sampled tokens to ``input_ids`` (B, S); returns (B, S + new).

        temperature 0 decodes greedily; top_k keeps the k most likely tokens. With ``use_cache`` the
        prompt is prefilled once into a cache preallocated for the whole output and each step attends
        from one new query to it; without it every step recomputes the whole sequence (same tokens,
        for testing and comparison; a model that draws positions at evaluation always decodes so). Runs in
        eval mode (no dropout) and restores the previous mode.
        Prompts of different lengths: left-padded, with ``attention_mask`` (B, S) of 1 (token) and 0
        (padding); each row then generates what its prompt alone generates (greedy), and the padding stays in
        the output.
        """
        return generate(self, input_ids, max_new_tokens, temperature, top_k, use_cache, generator, attention_mask)

    def save_pretrained(self, directory: str | os.PathLike) -> None:
        """Write config.json and model.safetensors atomically as a pair (``models.io.save_pretrained``)."""
        save_pretrained(self, directory)

    @classmethod
    def from_pretrained(
        cls, directory: str | os.PathLike, device: str | torch.device = "cpu", config: ModelConfig | None = None
    ) -> TransformerLM:
        """Rebuild a model saved by ``save_pretrained`` (with ``config`` instead of the saved one, if given);
        fails clearly on a missing or corrupt directory."""
        return load_pretrained(cls, directory, device, config)
