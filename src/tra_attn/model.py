"""Decoder-only transformer LM: token embedding -> N blocks -> RMSNorm -> untied output head.

Only the attention layer differs between methods (ModelConfig.attention), so every comparison
shares the rest of the model and the training harness.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from torch import nn

from .config import ModelConfig
from .layers import ATTENTION_LAYERS, KVCache, LayerCache
from .layers.norms import RMSNorm
from .utils.atomic import atomic_write, atomic_write_text

CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"


def sample_next(logits: torch.Tensor, temperature: float, top_k: int | None, generator=None) -> torch.Tensor:
    """Next token ids (B,) from logits (B, V): greedy at temperature 0, else top-k softmax sampling."""
    if temperature == 0:
        return logits.argmax(-1)
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    return torch.multinomial(probs, 1, generator=generator).squeeze(-1)


class SwiGLU(nn.Module):
    """up: d -> 2h (two halves a, b); out = down(dropout(a * silu(b)))."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        hidden = int(config.mlp_ratio * config.d_model)
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
        self.attn = ATTENTION_LAYERS[config.attention](config)
        self.norm2 = RMSNorm(config.d_model, config.norm_eps)
        self.mlp = SwiGLU(config)
        self.dropout = nn.Dropout(config.dropout)

    def forward(self, x: torch.Tensor, cache: LayerCache | None = None) -> torch.Tensor:
        if self.style == "paper":
            x = self.norm1(x)
            x = x + self.dropout(self.attn(x, cache))
            x = self.norm2(x)
            return x + self.dropout(self.mlp(x))
        x = x + self.dropout(self.attn(self.norm1(x), cache))
        return x + self.dropout(self.mlp(self.norm2(x)))


class TransformerLM(nn.Module):
    """``TransformerLM(config)(input_ids) -> logits (B, S, vocab_size)``."""

    def __init__(self, config: ModelConfig):
        super().__init__()
        self.config = config
        self.embed = nn.Embedding(config.vocab_size, config.d_model)
        self.dropout = nn.Dropout(config.dropout)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.norm = RMSNorm(config.d_model, config.norm_eps)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """GPT-2 style: N(0, init_std) weights, zero biases, residual outputs scaled by 1/sqrt(2 N)."""
        std = self.config.init_std
        for module in self.modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                nn.init.normal_(module.weight, std=std)
            if isinstance(module, nn.Linear) and module.bias is not None:
                nn.init.zeros_(module.bias)
        for block in self.blocks:
            for proj in (block.attn.o_proj, block.mlp.down):
                nn.init.normal_(proj.weight, std=std / math.sqrt(2 * self.config.n_layers))
            block.attn.post_init(self.config)

    def forward(self, input_ids: torch.Tensor, cache: KVCache | None = None) -> torch.Tensor:
        self._check_input_ids(input_ids)
        x = self.dropout(self.embed(input_ids))
        for i, block in enumerate(self.blocks):
            x = block(x, None if cache is None else cache[i])
        return self.lm_head(self.norm(x))

    def _check_input_ids(self, input_ids) -> None:
        if not isinstance(input_ids, torch.Tensor) or input_ids.dim() != 2:
            shape = tuple(input_ids.shape) if isinstance(input_ids, torch.Tensor) else type(input_ids).__name__
            raise ValueError(f"TransformerLM: input_ids shape = {shape}; expected a 2-d (batch, seq) tensor")
        if input_ids.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
            raise ValueError(f"TransformerLM: input_ids.dtype = {input_ids.dtype}; expected an integer dtype")
        if input_ids.numel() and (input_ids.min() < 0 or input_ids.max() >= self.config.vocab_size):
            raise ValueError(
                f"TransformerLM: token ids span [{input_ids.min().item()}, {input_ids.max().item()}]; "
                f"expected ids in [0, {self.config.vocab_size})"
            )

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def new_cache(self) -> KVCache:
        return KVCache(self.config.n_layers)

    @torch.no_grad()
    def generate(
        self,
        input_ids: torch.Tensor,
        max_new_tokens: int,
        temperature: float = 1.0,
        top_k: int | None = None,
        use_cache: bool = True,
        generator: torch.Generator | None = None,
    ) -> torch.Tensor:
        """Append ``max_new_tokens`` sampled tokens to ``input_ids`` (B, S); returns (B, S + new).

        temperature 0 decodes greedily; top_k keeps the k most likely tokens. With ``use_cache`` the
        prompt is prefilled once and each step attends from one new query to the KV cache; without
        it every step recomputes the whole sequence (same tokens, for testing and comparison).
        Runs in eval mode (no dropout) and restores the previous mode.
        """
        if not isinstance(max_new_tokens, int) or max_new_tokens < 0:
            raise ValueError(f"generate: max_new_tokens = {max_new_tokens!r}; expected a non-negative integer")
        if not isinstance(temperature, (int, float)) or not temperature >= 0:
            raise ValueError(f"generate: temperature = {temperature!r}; expected a number >= 0")
        if top_k is not None and (not isinstance(top_k, int) or top_k <= 0):
            raise ValueError(f"generate: top_k = {top_k!r}; expected None or a positive integer")
        was_training = self.training
        self.eval()
        try:
            ids = input_ids
            cache = self.new_cache() if use_cache else None
            logits = self(ids, cache=cache)[:, -1]
            for step in range(max_new_tokens):
                token = sample_next(logits, temperature, top_k, generator)
                ids = torch.cat([ids, token[:, None]], dim=1)
                if step + 1 < max_new_tokens:
                    logits = (self(token[:, None], cache=cache) if use_cache else self(ids))[:, -1]
        finally:
            self.train(was_training)
        return ids

    def save_pretrained(self, directory: str | os.PathLike) -> None:
        """Write config.json and model.safetensors, each atomically (temp file, then rename)."""
        directory = Path(directory)
        directory.mkdir(parents=True, exist_ok=True)
        state = {name: t.detach().contiguous().cpu() for name, t in self.state_dict().items()}
        atomic_write(directory / WEIGHTS_NAME, lambda path: save_file(state, str(path)))
        atomic_write_text(directory / CONFIG_NAME, self.config.to_json())

    @classmethod
    def from_pretrained(cls, directory: str | os.PathLike, device: str | torch.device = "cpu") -> TransformerLM:
        """Rebuild a model saved by ``save_pretrained``; fails clearly on a missing or corrupt directory."""
        directory = Path(directory)
        for name in (CONFIG_NAME, WEIGHTS_NAME):
            if not (directory / name).is_file():
                raise ValueError(
                    f"from_pretrained: {directory / name} does not exist; expected a "
                    f"directory written by save_pretrained ({CONFIG_NAME} + {WEIGHTS_NAME})"
                )
        try:
            config = ModelConfig.from_dict(json.loads((directory / CONFIG_NAME).read_text()))
        except (json.JSONDecodeError, TypeError) as err:
            raise ValueError(f"from_pretrained: {directory / CONFIG_NAME} is not a valid config ({err})") from err
        try:
            state = load_file(str(directory / WEIGHTS_NAME), device=str(device))
        except Exception as err:  # safetensors raises its own error types for truncated files
            raise ValueError(f"from_pretrained: {directory / WEIGHTS_NAME} is corrupt ({err})") from err
        model = cls(config).to(device)
        try:
            model.load_state_dict(state, strict=True)
        except RuntimeError as err:
            raise ValueError(f"from_pretrained: weights do not match the config ({err})") from err
        return model
