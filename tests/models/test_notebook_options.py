"""The options that reproduce the TRA authors' notebook: dropout on the attention logits (every kind),
residual branches without dropout, and the notebook's initialisation."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tests.conftest import attention_fields, attention_settings
from tra_attn import ATTENTION_KINDS, ModelConfig, TransformerLM, threshold_relative_attention
from tra_attn.layers.norms import rms_normalize
from tra_attn.ops.alibi import alibi_attention, alibi_bias, alibi_slopes
from tra_attn.ops.causal import causal_sdpa
from tra_attn.ops.cope import cope_attention
from tra_attn.ops.fox import forgetting_attention
from tra_attn.ops.masks import causal_mask
from tra_attn.ops.tra import KeepRule, TrainingAids
from tra_attn.ops.tra.naive import dropout_factors, keep_mask, tra_naive
from tra_attn.upgrade.configs import upgrade_model_config
from tra_attn.utils.dataclass_io import OldVersion

KINDS = attention_settings(sorted(ATTENTION_KINDS))  # every kind, and the TRA ablations (options of tra)
P = 0.3  # large enough that every test row sees dropped logits


def notebook_tra(q, k, v, log_gate, dropout):
    """A line-by-line transcription of the notebook's TRA forward (training mode), -1e11 fills and all;
    ``dropout`` stands for the notebook's F.dropout(., p), so that both sides can draw the same mask."""
    n = q.shape[-2]
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(~causal_mask(n, n), -1e11)
    scores = F.relu(scores)
    mask = scores == 0
    distance = ((~mask) * log_gate[..., None]).flip(-1).cumsum(-1).flip(-1)
    attn = dropout(scores + distance)
    attn = attn.masked_fill(mask, -1e11)
    attn = torch.softmax(attn, dim=-1)
    attn = attn.masked_fill(mask.all(-1, keepdim=True), 0)
    return attn @ v


def inputs(seed=0, b=2, h=3, s=11, d=8):
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, h, s, d, generator=gen, dtype=torch.float64) for _ in range(3))
    log_gate = F.logsigmoid(torch.randn(b, h, s, generator=gen, dtype=torch.float64))
    return q, k, v, log_gate


def test_tra_logit_dropout_equals_the_notebook_forward():
    """The notebook's dropout, F.dropout on the logits, given the op's mask (a hash of the seed and the
    position, ops/tra/dropout.py): a dropped logit becomes 0 and stays in the softmax, a kept one is scaled."""
    q, k, v, log_gate = inputs()
    q[0, 0, 0] = -k[0, 0, 0]  # the first query keeps no key: a zero row
    contract = {"scale": q.shape[-1] ** -0.5, "keep": KeepRule(0.0)}
    ours = tra_naive(q, k, v, log_gate, **contract, aids=TrainingAids(logit_dropout=P, dropout_seed=5))
    factors = dropout_factors(P, 5, torch.empty(2, 3, 11, 11, dtype=torch.float64))
    theirs = notebook_tra(q, k, v, log_gate, lambda logits: logits * factors)
    torch.testing.assert_close(ours, theirs, atol=1e-12, rtol=1e-12)
    assert ours[0, 0, 0].abs().max() == 0
    assert set(factors.unique().tolist()) == {0.0, 1 / (1 - P)}
    other = tra_naive(q, k, v, log_gate, **contract, aids=TrainingAids(logit_dropout=P, dropout_seed=6))
    assert not torch.allclose(ours, other)


@pytest.mark.parametrize("impl", ["naive", "chunked"])
def test_every_impl_drops_the_same_logits(impl):
    q, k, v, log_gate = inputs()
    ours = threshold_relative_attention(q, k, v, log_gate, impl=impl, logit_dropout=P, dropout_seed=5)
    aids = TrainingAids(logit_dropout=P, dropout_seed=5)
    reference = tra_naive(q, k, v, log_gate, scale=q.shape[-1] ** -0.5, keep=KeepRule(0.0), aids=aids)
    torch.testing.assert_close(ours, reference, atol=1e-14, rtol=0)
    assert not torch.allclose(ours, threshold_relative_attention(q, k, v, log_gate, impl=impl))
    torch.manual_seed(5)  # no seed: one drawn from torch's generator, the same after the same manual_seed
    drawn = threshold_relative_attention(q, k, v, log_gate, impl=impl, logit_dropout=P)
    torch.manual_seed(5)
    assert torch.equal(drawn, threshold_relative_attention(q, k, v, log_gate, impl=impl, logit_dropout=P))
    q[0, 1, 3, 0] = math.nan  # the op's non-finite rule holds with dropout too: that row is NaN, no other
    out = threshold_relative_attention(q, k, v, log_gate, impl=impl, logit_dropout=P, dropout_seed=5)
    assert out[0, 1, 3].isnan().all() and out.isnan().sum() == out.shape[-1]


def autocast_inputs():
    """Normalised q, k (as the TRA layer makes them) and v = identity, so that output row r holds row r's
    attention weights: nonzero exactly on the kept keys (a dropped logit becomes 0, not -inf)."""
    gen = torch.Generator().manual_seed(0)
    s = 128
    q, k = (rms_normalize(torch.randn(1, 2, s, s, generator=gen), 1e-6) for _ in range(2))
    return q, k, torch.eye(s).expand(1, 2, s, s), torch.full((1, 2, s), -0.01)


@pytest.mark.parametrize("caller", ["op", "tra", "tra_keygate"])
def test_logit_dropout_under_bf16_autocast_keeps_the_fp32_keep_decisions(caller):
    """The TRA layer's dropout path used to call tra_naive under the caller's autocast: its scores came from a
    bf16 matmul, so bf16 training kept other keys than fp32 evaluation does (13 of 16512 causal decisions at
    threshold 0.3 here). Through the op (and in the key-gate op) autocast is off: same output, same keys."""
    q, k, v, log_gate = autocast_inputs()
    threshold = 0.3
    attention = attention_fields(caller if caller != "op" else "tra")
    config = ModelConfig(d_model=256, n_heads=2, **attention, attention_dropout=P)
    layer = TransformerLM(config).blocks[0].attn  # in training mode: its logits are dropped
    run = {
        "op": lambda: threshold_relative_attention(q, k, v, log_gate, threshold=threshold, logit_dropout=P),
        "tra": lambda: layer.op(q, k, v, log_gate, KeepRule(threshold)),
        "tra_keygate": lambda: layer.op(q, k, v, log_gate, KeepRule(threshold)),
    }[caller]
    torch.manual_seed(3)
    plain = run()
    torch.manual_seed(3)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        autocast = run()
    torch.testing.assert_close(autocast, plain, atol=0, rtol=0)
    scores = q.shape[-1] ** -0.5 * (q @ k.transpose(-1, -2))
    assert torch.equal(autocast != 0, keep_mask(scores, threshold))


def dropped(logits, keep, p):
    """The notebook's recipe on given logits: dropout, -1e11 on masked entries, softmax."""
    logits = F.dropout(logits.masked_fill(~keep, 0.0), p, training=True)
    return torch.softmax(logits.masked_fill(~keep, -1e11), dim=-1)


def test_baseline_logit_dropout_equals_dropout_on_their_logits():
    q, k, v, log_gate = inputs(1)
    s = q.shape[-2]
    scores = q @ k.transpose(-1, -2) / math.sqrt(q.shape[-1])
    keep = causal_mask(s, s)
    slopes = alibi_slopes(q.shape[1]).double()
    cumulative = log_gate.cumsum(-1)
    fox_bias = cumulative[..., :, None] - cumulative[..., None, :]
    cases = {
        "nope": (lambda: causal_sdpa(q, k, v, logit_dropout=P), scores),
        "alibi": (lambda: alibi_attention(q, k, v, slopes, logit_dropout=P), scores + alibi_bias(slopes, s, s)),
        "fox": (lambda: forgetting_attention(q, k, v, log_gate, logit_dropout=P), scores + fox_bias),
    }
    for name, (op, logits) in cases.items():
        torch.manual_seed(3)
        ours = op()
        torch.manual_seed(3)
        theirs = dropped(torch.where(keep, logits, 0.0), keep, P) @ v
        torch.testing.assert_close(ours, theirs, atol=1e-12, rtol=1e-12, msg=name)


def test_cope_logit_dropout_drops_the_same_logits_as_its_exact_path_uses():
    q, k, v, _ = inputs(2)
    table = torch.randn(q.shape[-1], 6, dtype=torch.float64)
    exact = cope_attention(q, k, v, table)
    # With p -> 0 nothing is dropped (every Bernoulli draw keeps), and the scale 1 / (1 - p) -> 1.
    torch.testing.assert_close(cope_attention(q, k, v, table, logit_dropout=1e-15), exact, atol=1e-12, rtol=1e-12)
    torch.manual_seed(0)
    assert not torch.allclose(cope_attention(q, k, v, table, logit_dropout=P), exact)


@pytest.mark.parametrize("kind", KINDS)
def test_attention_dropout_acts_in_training_only(kind):
    torch.manual_seed(0)
    config = dict(vocab_size=13, d_model=32, n_layers=2, n_heads=4, **attention_fields(kind))
    model = TransformerLM(ModelConfig(**config, attention_dropout=P)).double()
    plain = TransformerLM(ModelConfig(**config)).double()
    plain.load_state_dict(model.state_dict())
    ids = torch.randint(0, 13, (2, 17))
    model.eval(), plain.eval()
    torch.testing.assert_close(model(ids), plain(ids), atol=0, rtol=0)
    model.train(), plain.train()
    torch.manual_seed(1)
    out = model(ids)
    assert torch.isfinite(out).all() and not torch.allclose(out, plain(ids))
    out.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None)


def test_residual_dropout_off_leaves_the_embedding_and_mlp_dropout():
    config = dict(vocab_size=13, d_model=32, n_layers=1, n_heads=4, dropout=0.5)
    off = TransformerLM(ModelConfig(**config, residual_dropout=False))
    on = TransformerLM(ModelConfig(**config))
    assert off.blocks[0].dropout.p == 0 and on.blocks[0].dropout.p == 0.5
    assert off.dropout.p == 0.5 and off.blocks[0].mlp.dropout.p == 0.5


def test_notebook_initialisation():
    torch.manual_seed(0)
    model = TransformerLM(ModelConfig(vocab_size=300, d_model=64, n_layers=2, n_heads=4, init_scheme="notebook"))
    assert model.embed.weight.abs().max() <= 0.01 and model.embed.weight.std() > 0.005
    assert abs(model.lm_head.weight.std().item() - 0.02) < 0.002
    attn = model.blocks[0].attn
    bound = 1 / math.sqrt(64)  # PyTorch's default Linear init: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
    for linear in (attn.q_proj, attn.o_proj, attn.gate_proj, model.blocks[0].mlp.up):
        assert linear.weight.abs().max() <= bound and linear.weight.std() > bound / 3
    assert torch.all(attn.gate_proj.bias == 0)  # the option's value (default 0), under either scheme
    normal = TransformerLM(ModelConfig(vocab_size=300, d_model=64, n_layers=2, n_heads=4))
    assert torch.all(normal.blocks[0].attn.gate_proj.bias == 0)


@pytest.mark.parametrize(
    "kind,options,bias",
    [("tra", {"gate_bias_init": 3.0}, "gate_proj"), ("fox", {"gate_bias_init": -2.0}, "fgate_proj"),
     ("wall", {"gate_bias_init": 1.5}, "gate_proj"), ("asentmax", {"beta_bias_init": 0.5}, "beta_proj")],
)  # fmt: skip
def test_notebook_initialisation_keeps_what_the_options_set(kind, options, bias):
    """The notebook's PyTorch-default initialisation runs before each layer's post_init, never after it: a bias
    an option sets is that value under either scheme."""
    for scheme in ("notebook", "normal"):
        config = ModelConfig(
            vocab_size=50, d_model=32, n_layers=2, n_heads=4, init_scheme=scheme, attention=kind,
            attention_options=options,
        )  # fmt: skip
        model = TransformerLM(config)
        value = next(iter(options.values()))
        for block in model.blocks:
            assert torch.all(getattr(block.attn, bias).bias == value), (scheme, kind)


@pytest.mark.parametrize(
    "overrides,pattern",
    [
        ({"attention_dropout": 1.0}, r"attention_dropout = 1\.0; expected a probability in \[0, 1\)"),
        ({"attention_dropout": -0.1}, r"attention_dropout = -0\.1; expected a probability"),
        ({"residual_dropout": "no"}, r"residual_dropout = 'no'; expected true or false"),
        ({"init_scheme": "xavier"}, r"init_scheme = 'xavier'; expected one of \('normal', 'notebook'\)"),
    ],
)
def test_bad_notebook_options(overrides, pattern):
    with pytest.raises(ValueError, match=pattern):
        ModelConfig(**overrides)


def test_version_3_model_configs_load_with_the_library_placement():
    data = {**ModelConfig().to_dict(), "version": 3}
    for name in ("attention_dropout", "residual_dropout", "init_scheme"):
        del data[name]
    with pytest.raises(OldVersion, match=r"ModelConfig version 3, written by an earlier version of tra"):
        ModelConfig.from_dict(data)
    loaded = ModelConfig.from_dict(upgrade_model_config(data))
    assert (loaded.attention_dropout, loaded.residual_dropout, loaded.init_scheme) == (0.0, True, "normal")


@pytest.mark.parametrize("kind", KINDS)
def test_the_paper_preset_builds_the_notebook_model_for_every_kind(kind):
    from tra_attn.experiments.engine import run_config
    from tra_attn.experiments.flipflop import FLIPFLOP
    from tra_attn.experiments.methods import Method
    from tra_attn.experiments.spec import Question

    fields = attention_fields(kind)  # a TRA ablation is the method of tra with its options
    method = Method(fields["attention"], options=fields["attention_options"])
    question = Question("x?", "flipflop", (method,), (0,), preset="paper")
    config = run_config(FLIPFLOP, question, method, 1e-4, 0)
    model = config.model
    assert model.attention == fields["attention"]
    assert all(getattr(model.attention_options, k) == v for k, v in fields["attention_options"].items())
    assert (model.block_style, model.dropout, model.attention_dropout) == ("paper", 0.01, 0.01)
    assert (model.residual_dropout, model.init_scheme) == (False, "notebook")
    assert (config.steps, config.batch_size, config.length, config.grad_clip) == (25_000, 64, 512, 0.0)
    torch.manual_seed(0)
    lm = TransformerLM(model).train()
    lm(torch.randint(0, model.vocab_size, (2, 40))).sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in lm.parameters() if p.grad is not None)
