"""Autoregressive generation with a KV cache: prefill the prompt once, then one query per new token.

Prompts of different lengths come left-padded with an ``attention_mask``: the cache keeps the segment ids
of the prompt (models/documents.py), and every new token continues its row's document.
"""

from __future__ import annotations

import torch

from ..ops.varlen import check_padding_mask
from ..utils.checks import is_int
from .token_ids import as_index


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


def check_generate_args(model, input_ids, max_new_tokens, temperature, top_k, attention_mask=None) -> None:
    """Validate once, at the boundary: token ids in range, a non-empty prompt, sane sampling options, and a
    padding mask (if any) that pads on the left."""
    model.check_input_ids(input_ids, attention_mask)
    if input_ids.shape[0] == 0 or input_ids.shape[1] == 0:
        raise ValueError(
            f"generate: input_ids shape = {tuple(input_ids.shape)}; expected a prompt of at least one token "
            "for at least one sequence"
        )
    if attention_mask is not None:
        check_padding_mask(attention_mask, *input_ids.shape, input_ids.device, "generate", "attention_mask")
        right = (attention_mask[:, -1] == 0).nonzero().flatten().tolist()
        if right:
            raise ValueError(
                f"generate: attention_mask[{right[0]}, -1] = 0; expected left padding (new tokens follow the last "
                "token of each row: pad prompts on the left)"
            )
    if not is_int(max_new_tokens) or max_new_tokens < 0:
        raise ValueError(f"generate: max_new_tokens = {max_new_tokens!r}; expected a non-negative integer")
    if not isinstance(temperature, (int, float)) or not temperature >= 0 or temperature == float("inf"):
        raise ValueError(f"generate: temperature = {temperature!r}; expected a finite number >= 0")
    if top_k is not None and (not is_int(top_k) or top_k <= 0):
        raise ValueError(f"generate: top_k = {top_k!r}; expected None or a positive integer")


@torch.no_grad()
def generate(
    model, input_ids, max_new_tokens, temperature=1.0, top_k=None, use_cache=True, generator=None, attention_mask=None
):
    """See ``TransformerLM.generate``."""
    check_generate_args(model, input_ids, max_new_tokens, temperature, top_k, attention_mask)
    input_ids = as_index(input_ids)  # room for every id of the vocabulary (a uint8 prompt, say)
    use_cache = use_cache and not model.draws_positions_at_eval  # positions drawn per forward: no cache to continue
    was_training = model.training
    model.eval()
    try:
        b, prompt = input_ids.shape
        ids = input_ids.new_empty((b, prompt + max_new_tokens))
        ids[:, :prompt] = input_ids
        mask = None
        if attention_mask is not None:  # without a cache every step reads the whole mask: new tokens are real
            mask = attention_mask.new_ones((b, prompt + max_new_tokens))
            mask[:, :prompt] = attention_mask
        cache = model.new_cache(capacity=prompt + max_new_tokens) if use_cache else None
        logits = model(input_ids, cache=cache, attention_mask=attention_mask)[:, -1]
        for step in range(max_new_tokens):
            end = prompt + step
            ids[:, end] = sample_next(logits, temperature, top_k, generator)
            if step + 1 < max_new_tokens:
                if use_cache:  # the cache continues each row's document
                    logits = model(ids[:, end : end + 1], cache=cache)[:, -1]
                else:
                    logits = model(ids[:, : end + 1], attention_mask=None if mask is None else mask[:, : end + 1])
                    logits = logits[:, -1]
    finally:
        model.train(was_training)
    return ids
