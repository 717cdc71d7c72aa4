"""Autoregressive generation with a KV cache: prefill the prompt once, then one query per new token."""

from __future__ import annotations

import torch

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


def check_generate_args(model, input_ids, max_new_tokens, temperature, top_k) -> None:
    """Validate once, at the boundary: token ids in range, a non-empty prompt, sane sampling options."""
    model.check_input_ids(input_ids)
    if input_ids.shape[0] == 0 or input_ids.shape[1] == 0:
        raise ValueError(
            f"generate: input_ids shape = {tuple(input_ids.shape)}; expected a prompt of at least one token "
            "for at least one sequence"
        )
    if not isinstance(max_new_tokens, int) or isinstance(max_new_tokens, bool) or max_new_tokens < 0:
        raise ValueError(f"generate: max_new_tokens = {max_new_tokens!r}; expected a non-negative integer")
    if not isinstance(temperature, (int, float)) or not temperature >= 0 or temperature == float("inf"):
        raise ValueError(f"generate: temperature = {temperature!r}; expected a finite number >= 0")
    if top_k is not None and (not isinstance(top_k, int) or isinstance(top_k, bool) or top_k <= 0):
        raise ValueError(f"generate: top_k = {top_k!r}; expected None or a positive integer")


@torch.no_grad()
def generate(model, input_ids, max_new_tokens, temperature=1.0, top_k=None, use_cache=True, generator=None):
    """See ``TransformerLM.generate``."""
    check_generate_args(model, input_ids, max_new_tokens, temperature, top_k)
    input_ids = as_index(input_ids)  # room for every id of the vocabulary (a uint8 prompt, say)
    was_training = model.training
    model.eval()
    try:
        b, prompt = input_ids.shape
        ids = input_ids.new_empty((b, prompt + max_new_tokens))
        ids[:, :prompt] = input_ids
        cache = model.new_cache(capacity=prompt + max_new_tokens) if use_cache else None
        logits = model(input_ids, cache=cache)[:, -1]
        for step in range(max_new_tokens):
            end = prompt + step
            ids[:, end] = sample_next(logits, temperature, top_k, generator)
            if step + 1 < max_new_tokens:
                logits = (model(ids[:, end : end + 1], cache=cache) if use_cache else model(ids[:, : end + 1]))[:, -1]
    finally:
        model.train(was_training)
    return ids
