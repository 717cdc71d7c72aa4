"""The harness as a whole: one registry entry per attention kind, methods as data, no task in generic rooms, no
graph breaks in the forward, the model's own loss, preallocated caches, and results unchanged since 0.1."""

from __future__ import annotations

import argparse
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from tra_attn import ATTENTION_KINDS, AttentionKind, ModelConfig, TransformerLM, register_attention
from tra_attn.cli import build_parser, main
from tra_attn.experiments.methods import PALETTE, Method, every_kind
from tra_attn.layers import Attention, KindOptions, option, unregister_attention
from tra_attn.models import IGNORE_INDEX, loss
from tra_attn.ops.causal import causal_sdpa
from tra_attn.utils.cli_help import HelpFormatter

FIXTURES = Path(__file__).parents[1] / "fixtures"
SRC = Path(__file__).parents[2] / "src" / "tra_attn"


@dataclass(frozen=True)
class HalfScaleOptions(KindOptions):
    prefix = "half"
    factor: float = option(0.5, "the factor on the usual logit scale")


class HalfScaleNoPE(Attention):
    """A new kind defined outside the package: causal attention with a fraction (its option) of the usual
    logit scale."""

    Options = HalfScaleOptions

    def attend(self, x, q, k, v, cache):
        k, v, _ = self.with_cache(cache, k, v)
        return causal_sdpa(q, k, v, scale=self.options.factor / self.head_dim**0.5)


@pytest.fixture
def half_scale_layer():
    """The new kind registered as a layer: a method as soon as a spec names it."""
    kind = register_attention(AttentionKind("half_scale_nope", HalfScaleNoPE))
    yield kind
    unregister_attention(kind.name)


def test_a_kind_registered_in_a_test_file_is_a_method_with_a_derived_label_and_colour(half_scale_layer):
    from tra_attn.experiments.pages.tables import Legend

    method = Method("half_scale_nope", options={"factor": 0.25})
    assert method.label == "half_scale_nope (factor=0.25)" and method.color == ""
    legend = Legend([Method("tra"), method, Method("tra", options={"local_window": 4})])
    assert legend.color("TRA") == "#d62728" and legend.color(method.label) == PALETTE[0]
    assert legend.color("TRA (local_window=4)") == PALETTE[1]  # each variant its own colour on a page
    assert Method("half_scale_nope").label == "half_scale_nope" and every_kind()[-1] == Method("half_scale_nope")


def test_a_kind_registered_outside_the_package_owns_its_options(half_scale_layer, tmp_path):
    """A new kind's options are one dataclass: the config checks them, the layer builds from plain arguments,
    `tra train` has a flag for each, methods set them."""
    config = ModelConfig(
        vocab_size=13, d_model=16, n_heads=2, attention="half_scale_nope", attention_options={"factor": 1}
    )
    assert config.attention_options == HalfScaleOptions(factor=1.0)
    with pytest.raises(
        ValueError, match=r"\['scale'\] are not options of attention = 'half_scale_nope'; its options: factor"
    ):
        ModelConfig(attention="half_scale_nope", attention_options={"scale": 1.0})
    assert HalfScaleNoPE(d_model=16, n_heads=2, factor=0.25).options.factor == 0.25
    parsed = build_parser().parse_args(["train", "--out", "x", "--half-factor", "0.1"])  # a flag of its own
    assert parsed.option_half_factor == 0.1
    argv = ["train", "--out", str(tmp_path / "r"), "--attention", "half_scale_nope", "--half-factor", "0.75"]
    argv += ["--steps", "1", "--length", "8", "--batch-size", "2", "--eval-every", "0", "--d-model", "16"]
    assert main([*argv, "--no-progress"]) == 0
    saved = json.loads((tmp_path / "r" / "train_config.json").read_text())
    assert saved["model"]["attention_options"] == {"factor": 0.75}


def test_registering_a_taken_name_or_a_non_layer_is_refused():
    with pytest.raises(ValueError, match=r"'tra' is already registered"):
        register_attention(AttentionKind("tra", HalfScaleNoPE))
    with pytest.raises(TypeError, match=r"expected an Attention subclass"):
        register_attention(AttentionKind("bad", torch.nn.Linear))


@pytest.mark.parametrize(
    "build,pattern",
    [
        (lambda: Method("mine"), r"Method\.kind = 'mine'; expected one of \['tra', "),
        (lambda: Method("tra", options={"base": 2.0}), r"\['base'\] are not options of attention = 'tra'"),
        (lambda: Method("tra", options={"threshold": "high"}), r"TRAOptions\.threshold = 'high'; expected a number"),
        (lambda: Method("tra", model={"attention": "rope"}), r"model: \['attention'\] are not ModelConfig fields"),
        (lambda: Method("tra", train={"lr": 1.0}), r"train: \['lr'\] are not TrainConfig fields a method sets"),
        (lambda: Method("tra", model=[]), r"Method\('tra'\)\.model = \[\]; expected a dict"),
        (lambda: Method("tra", lrs=(0.0,)), r"lrs = \(0\.0,\); expected finite positive learning rates"),
        (lambda: Method("tra", lrs=(1e-3, 1e-3)), r"expected each rate once"),
    ],
)
def test_bad_methods_are_refused_naming_the_field(build, pattern):
    with pytest.raises(ValueError, match=pattern):
        build()


def test_a_method_is_what_it_trains_and_its_label():
    assert Method("tra", options={"threshold": -1}) == Method("tra", options={"threshold": -1.0})
    assert Method("tra").signature == Method("tra", label="other").signature
    assert Method("tra", options={"local_window": 4}, train={"length_spread": 0.75}).label == (
        "TRA (local_window=4; length_spread=0.75)"
    )


def test_tiny_flipflop_reproduces_the_rows_of_version_0_1(tmp_path, capsys):
    """`tra flipflop --preset tiny` gives, value for value, the rows 0.1.0 gave (metrics renamed since), for the
    methods 0.1.0 had (kinds registered since run in the preset too)."""
    from tra_attn.experiments.store import Evidence
    from tra_attn.upgrade.rows import RENAMED_METRICS

    old = [json.loads(line) for line in (FIXTURES / "flipflop_tiny_v0_1.jsonl").read_text().splitlines()]
    expected = {(r["method"], r["split"], r["length"], RENAMED_METRICS.get(r["metric"], r["metric"])): r for r in old}
    argv = ["flipflop", "--preset", "tiny", "--out", tmp_path, "--store", tmp_path / "store", "--no-progress"]
    assert main([str(a) for a in argv]) == 0
    capsys.readouterr()
    evidence = Evidence(tmp_path / "runs")
    got = {}
    former = {
        "gate": ("key", "tra_keygate"),
        "threshold": (-math.inf, "tra_nothreshold"),
        "distance": (False, "tra_nodistance"),
    }
    for record in map(evidence.get, evidence.runs()):
        kind, options = record.config["model"]["attention"], record.config["model"]["attention_options"]
        kind = next((name for option, (value, name) in former.items() if options.get(option) == value), kind)
        for r in record.rows("sequences=64"):
            got[(kind, r["split"], r["length"], r["metric"])] = (r, record)
    for key, row in expected.items():
        new, record = got[key]
        assert new["value"] == pytest.approx(row["value"], rel=1e-6, abs=0), key
        assert (record.config["lr"], record.config["seed"]) == (row["lr"], row["seed"]), key


def test_generic_rooms_name_no_task():
    """Only the flip-flop task, its experiment and the main job's command may mention flip-flop or its parameters."""
    allowed = {SRC / "data" / "synthetic" / "flipflop.py", *(SRC / "experiments" / "flipflop").rglob("*.py")}
    allowed |= {SRC / "cli" / "run.py", SRC / "cli" / "__init__.py"}
    pattern = re.compile(r"flipflop|p_ignore|final_read")
    offending = [
        f"{path.relative_to(SRC)}:{number}"
        for path in SRC.rglob("*.py")
        if path not in allowed
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if pattern.search(line)
    ]
    assert offending == []


@pytest.mark.parametrize("kind", list(ATTENTION_KINDS))
def test_the_forward_of_every_kind_has_no_graph_breaks(kind):
    model = TransformerLM(ModelConfig(vocab_size=13, d_model=32, n_layers=2, n_heads=4, attention=kind))
    ids = torch.randint(0, 13, (2, 17))
    for kwargs in ({}, {"labels": ids}):
        torch._dynamo.reset()
        explained = torch._dynamo.explain(model)(ids, **kwargs)
        assert explained.graph_break_count == 0, [str(b.reason) for b in explained.break_reasons]


def subcommand_parsers(parser):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield name, sub
                yield from ((f"{name} {n}", p) for n, p in subcommand_parsers(sub))


def test_every_flag_of_every_command_has_a_help_text_that_states_its_default():
    missing = []
    for name, parser in subcommand_parsers(build_parser()):
        formatter = HelpFormatter(prog=name)
        for action in parser._actions:
            if isinstance(action, (argparse._HelpAction, argparse._SubParsersAction)) or not action.option_strings:
                continue
            text = formatter._get_help_string(action) or ""
            if not (action.required or "default" in text):
                missing.append(f"tra {name} {action.option_strings[0]}")
    assert missing == []


def test_help_is_plain_text_without_docstring_markup():
    for name, parser in [("", build_parser()), *subcommand_parsers(build_parser())]:
        assert "``" not in parser.format_help(), f"tra {name} --help"


def test_the_help_of_every_command_renders():
    for name, parser in subcommand_parsers(build_parser()):
        assert parser.format_help(), name  # a stray '%' in a help text breaks argparse's formatting


def test_the_model_owns_its_loss_and_chunks_it_exactly(monkeypatch):
    torch.manual_seed(0)
    model = TransformerLM(ModelConfig(vocab_size=50, d_model=32, n_layers=1, n_heads=4))
    ids = torch.randint(0, 50, (3, 11))
    labels = ids.roll(-1, dims=1).masked_fill(torch.rand(3, 11) < 0.3, IGNORE_INDEX)
    logits = model(ids)
    reference = F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), reduction="none").view(3, 11)
    whole = model(ids, labels=labels)
    assert torch.equal(whole, reference) and (whole[labels == IGNORE_INDEX] == 0).all()
    (grad_whole,) = torch.autograd.grad(whole.sum(), model.lm_head.weight)
    monkeypatch.setattr(loss, "LOGIT_ELEMENTS", 50 * 4)  # chunks of 4 tokens, recomputed in the backward
    chunked = model(ids, labels=labels)
    (grad_chunked,) = torch.autograd.grad(chunked.sum(), model.lm_head.weight)
    assert torch.allclose(chunked, whole, rtol=1e-6, atol=1e-6)
    assert torch.allclose(grad_chunked, grad_whole, rtol=1e-5, atol=1e-7)
    with pytest.raises(ValueError, match=r"labels\.shape = \(3, 10\); expected \(3, 11\)"):
        model(ids, labels=labels[:, :10])


@pytest.mark.parametrize("kind", ["tra", "fox", "tra_keygate"])
def test_generation_writes_into_one_preallocated_cache(kind, monkeypatch):
    """The cache is allocated once for prompt + new tokens and never copied while decoding."""
    from tests.conftest import attention_fields
    from tra_attn.layers.cache import LayerCache

    model = TransformerLM(ModelConfig(vocab_size=13, d_model=32, n_layers=2, n_heads=4, **attention_fields(kind)))
    reserved = []
    original = LayerCache._reserve

    def spy(self, needed, *args):
        before = None if self._keys is None else self._keys.data_ptr()
        original(self, needed, *args)
        reserved.append((before, self._keys.data_ptr(), self._keys.shape[-2]))

    monkeypatch.setattr(LayerCache, "_reserve", spy)
    model.generate(torch.randint(0, 13, (2, 5)), max_new_tokens=20, temperature=0)
    allocations = {(after, size) for before, after, size in reserved if before != after}
    assert len(allocations) == model.config.n_layers and {size for _, size in allocations} == {25}


def test_an_unsized_cache_grows_geometrically():
    from tra_attn.layers.cache import LayerCache

    cache, sizes = LayerCache(), set()
    for step in range(100):
        keys = torch.full((1, 2, 1, 4), float(step))
        cache.update(keys, keys.clone(), log_gate=torch.full((1, 2, 1), float(step)))
        sizes.add(cache._keys.shape[-2])
    assert sizes == {1, 2, 4, 8, 16, 32, 64, 128}
    assert torch.equal(cache.keys[0, 0, :, 0], torch.arange(100.0))
    assert torch.equal(cache.extras["log_gate"][0, 1], torch.arange(100.0))
