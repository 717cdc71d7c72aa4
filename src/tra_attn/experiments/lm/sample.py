"""Text from a trained language model: the tokenizer recorded in the model, generation with the KV cache."""

from __future__ import annotations

import torch

from ...data.text import make_tokenizer
from ...models import TransformerLM
from ...training.checkpoint import resolve_checkpoint
from ...training.config import check_device


def load_tokenizer(model: TransformerLM, where) -> object:
    """The tokenizer the model was trained with, rebuilt and checked against the recorded file hashes."""
    recorded = model.config.tokenizer
    if recorded is None:
        raise ValueError(f"{where}: the model has no text tokenizer (it reads a task vocabulary); expected an lm model")
    tokenizer = make_tokenizer(recorded["name"])
    if tokenizer.describe() != recorded:
        raise ValueError(
            f"{where}: the {recorded['name']} tokenizer here is {tokenizer.describe()}; expected the one the model "
            f"was trained with, {recorded}"
        )
    return tokenizer


def sample_text(
    checkpoint,
    prompt: str,
    max_new_tokens: int = 200,
    temperature: float = 0.8,
    top_k: int | None = None,
    seed: int = 0,
    device: str = "cpu",
) -> str:
    """The continuation of ``prompt`` (without the prompt) sampled from a checkpoint or saved model."""
    check_device(device)
    path = resolve_checkpoint(checkpoint)
    model = TransformerLM.from_pretrained(path, device=device)
    tokenizer = load_tokenizer(model, path)
    ids = tokenizer.encode(prompt)
    if not ids:
        raise ValueError("--prompt = ''; expected text of at least one token")
    generator = torch.Generator(device=device).manual_seed(seed)
    prompt_ids = torch.tensor([ids], device=device)
    out = model.generate(prompt_ids, max_new_tokens, temperature=temperature, top_k=top_k, generator=generator)
    return tokenizer.decode(out[0, len(ids) :].tolist())
