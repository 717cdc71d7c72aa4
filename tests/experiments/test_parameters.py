"""The parameter count on every methods table: the model a run's config builds, counted without building it."""

from __future__ import annotations

import pytest
import torch

from tra_attn import ModelConfig, TransformerLM
from tra_attn.experiments.parameters import parameter_count


@pytest.mark.parametrize("kind", ["tra", "fox_pro", "gated", "path", "cope"])
def test_the_count_is_that_of_the_model_the_config_builds(kind):
    model = ModelConfig(vocab_size=40, d_model=32, n_layers=2, n_heads=2, attention=kind, **(
        {"attention_options": {"max_pos": 16}} if kind == "cope" else {}))  # fmt: skip
    torch.manual_seed(0)
    built = TransformerLM(model)
    unique = {id(p): p.numel() for p in built.parameters()}
    assert parameter_count({"model": model.to_dict()}) == sum(unique.values())


def test_gated_attention_adds_its_output_gate_and_qk_norms():
    base = ModelConfig(vocab_size=40, d_model=32, n_layers=2, n_heads=2, attention="nope")
    gated = ModelConfig(vocab_size=40, d_model=32, n_layers=2, n_heads=2, attention="gated")
    more = parameter_count({"model": gated.to_dict()}) - parameter_count({"model": base.to_dict()})
    assert more == 2 * (32 * 32 + 2 * 16)  # per layer: W_g (d x d), and the q and k norms' weights (head dim 16)
