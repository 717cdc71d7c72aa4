"""The parameter count on every methods table: the model a run's config builds, counted without building it."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from tra_attn import ModelConfig, TransformerLM
from tra_attn.experiments.engine import run_config
from tra_attn.experiments.methods import Method
from tra_attn.experiments.parameters import matched_mlp, model_parameters, parameter_count, with_mlp_width
from tra_attn.experiments.registry import experiments
from tra_attn.experiments.spec import Question


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


@pytest.mark.parametrize("kind", ["fox_pro", "gated", "path", "nope"])
def test_a_matched_model_is_within_two_percent_through_its_mlp_width(kind):
    reference = ModelConfig(vocab_size=40, d_model=48, n_layers=2, n_heads=4, attention="tra")
    model = ModelConfig(vocab_size=40, d_model=48, n_layers=2, n_heads=4, attention=kind)
    target = model_parameters(reference)
    matched = matched_mlp(model, target, "x")
    assert abs(model_parameters(matched) - target) <= 0.02 * target
    assert dataclasses.replace(matched, mlp_ratio=model.mlp_ratio) == model  # the MLP width alone changed
    # The nearest width: one unit more or less is no closer.
    width = matched.mlp_width
    for other in (width - 1, width + 1):
        assert abs(model_parameters(with_mlp_width(model, other)) - target) >= abs(model_parameters(matched) - target)
    assert TransformerLM(matched).blocks[0].mlp.down.in_features == width  # the model builds that width


def test_widths_that_float_rounding_would_lose_are_kept():
    model = ModelConfig(vocab_size=40, d_model=48, n_layers=1, n_heads=4)
    assert all(with_mlp_width(model, width).mlp_width == width for width in range(1, 400))


def test_a_model_too_large_outside_its_mlp_is_refused_by_name():
    small = ModelConfig(vocab_size=40, d_model=16, n_layers=1, n_heads=2, attention="nope", mlp_ratio=0.1)
    large = ModelConfig(vocab_size=40, d_model=16, n_layers=1, n_heads=2, attention="fox_pro")
    with pytest.raises(ValueError, match=r"FoX Pro: [\d,]+ parameters at the MLP width nearest [\d,]+ \(1\); expected"):
        matched_mlp(large, model_parameters(small), "FoX Pro")


def test_a_question_matches_every_method_to_its_reference_but_one_that_sets_its_mlp():
    tra, fox_pro, gated = Method("tra"), Method("fox_pro"), Method("gated", model={"mlp_ratio": 1.0})
    question = Question("x?", "majority", (tra, fox_pro, gated), (0,), lrs=(1e-3,), lrs_source="a test",
                        match_parameters=tra)  # fmt: skip
    plain = dataclasses.replace(question, match_parameters=None)
    majority = experiments()["majority"]
    config = {m.label: run_config(majority, question, m, 1e-3, 0).model for m in question.methods}
    as_built = {m.label: run_config(majority, plain, m, 1e-3, 0).model for m in question.methods}
    target = model_parameters(config["TRA"])
    assert config["TRA"] == as_built["TRA"] and config[gated.label] == as_built[gated.label]
    assert model_parameters(as_built["FoX Pro"]) > 1.05 * target  # FoX Pro's layer is larger ...
    assert abs(model_parameters(config["FoX Pro"]) - target) <= 0.02 * target  # ... and its MLP narrower
    assert config["FoX Pro"].mlp_width < config["TRA"].mlp_width
    with pytest.raises(ValueError, match=r"Question\.match_parameters = Method\(kind='nope'.*expected one of the q"):
        dataclasses.replace(question, match_parameters=Method("nope"))
