"""The keep surrogate (ops/tra/surrogate.py): exact forward values, the exact gradient plus the derivative of the
relaxed keep weight through a sigmoid, the option through the op, the model config and the layer."""

from __future__ import annotations

import math

import pytest
import torch

from tests.conftest import assert_close, tra_inputs
from tra_attn import ModelConfig, TransformerLM, threshold_relative_attention
from tra_attn.layers.tra import TRAAttention
from tra_attn.ops.masks import causal_mask
from tra_attn.ops.tra import Documents, KeepRule, TrainingAids, dispatch, tra_chunked
from tra_attn.ops.tra.naive import keep_mask
from tra_attn.training import TrainConfig, train
from tra_attn.training.checkpoint import resolve_checkpoint
from tra_attn.upgrade.configs import upgrade_model_config
from tra_attn.utils.dataclass_io import OldVersion

THRESHOLD = 0.25


def op(inputs, tau=0.0, threshold=THRESHOLD, **options):
    q, k, v, g = inputs
    return threshold_relative_attention(q, k, v, g, threshold=threshold, impl="naive", keep_surrogate=tau, **options)


def grads(out, inputs, weights):
    return torch.autograd.grad((out * weights).sum(), inputs)


def scores_of(q, k):
    return (q @ k.transpose(-1, -2)).detach() / math.sqrt(q.shape[-1])


def has_empty_rows(q, k, threshold=THRESHOLD) -> bool:
    return bool((~keep_mask(scores_of(q, k), threshold).any(-1)).any())


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("autocast", [False, True])
def test_the_forward_values_are_the_exact_op_bit_for_bit(dtype, autocast):
    inputs = tra_inputs(2, 3, 23, 23, 8, dtype=dtype, seed=1)
    assert has_empty_rows(*inputs[:2])
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        exact, relaxed = op(inputs), op(inputs, tau=0.5)
        dropped = []
        for tau in (0.0, 1.0):
            torch.manual_seed(7)
            dropped.append(op(inputs, tau, logit_dropout=0.3))
    assert relaxed.dtype == dtype and torch.equal(relaxed, exact)
    assert torch.equal(dropped[0], dropped[1])  # the same logits dropped, the same values


def continuous_tra(scores, log_gate, v, m):
    """out_i = sum_j m_ij e^{z_ij} v_j / sum_j m_ij e^{z_ij}, z_ij = s_ij + g_i sum_{l=j..i} m_il; written out
    directly (no shift, no straight-through); rows with no weight give 0 (their loss weights are 0 below)."""
    count = torch.flip(torch.cumsum(torch.flip(m, [-1]), -1), [-1])
    weights = m * torch.exp(scores + log_gate[..., None] * count)
    total = weights.sum(-1, keepdim=True)
    return (weights @ v) / torch.where(total > 0, total, 1.0)


def test_the_gradient_is_the_exact_one_plus_the_relaxed_keep_weight_through_a_sigmoid():
    tau = 0.7
    q, k, v, g = inputs = tra_inputs(1, 2, 11, 11, 8, seed=2)
    keep = keep_mask(scores_of(q, k), THRESHOLD)
    weights = torch.randn(1, 2, 11, 8, dtype=torch.float64) * keep.any(-1, keepdim=True)  # empty rows: no loss
    exact, relaxed = (grads(op(inputs, tau), inputs, weights) for tau in (0.0, tau))

    # The reference: the continuous form's derivatives in s and in m, at m = keep, chained into q and k.
    scores = (q @ k.transpose(-1, -2)) / math.sqrt(8)
    s, m = scores.detach().requires_grad_(), keep.double().requires_grad_()
    d_s, d_m, d_g, d_v = torch.autograd.grad((continuous_tra(s, g, v, m) * weights).sum(), (s, m, g, v))
    sig = torch.sigmoid((s.detach() - THRESHOLD) / tau)
    d_scores = d_s + d_m * sig * (1 - sig) / tau * causal_mask(11, 11)
    d_q, d_k = torch.autograd.grad(scores, (q, k), d_scores, retain_graph=True)
    exact_q, exact_k = torch.autograd.grad(scores, (q, k), d_s)
    for got, want in zip(exact, (exact_q, exact_k, d_v, d_g)):
        torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-10)
    for got, want in zip(relaxed, (d_q, d_k, d_v, d_g)):  # v and the gate: the exact gradient
        torch.testing.assert_close(got, want, atol=1e-12, rtol=1e-10)
    assert (relaxed[1] - exact[1]).abs().max() > 1e-3

    # The derivative in m of a dropped key, by central differences of the continuous form.
    dropped = ~keep & causal_mask(11, 11) & keep.any(-1, keepdim=True)  # in a row that keeps some key
    at = tuple(dropped.nonzero()[-1])
    bump = torch.zeros_like(m)
    bump[at] = 1e-6
    with torch.no_grad():
        plus, minus = ((continuous_tra(s, g, v, keep.double() + sign * bump) * weights).sum() for sign in (1, -1))
    torch.testing.assert_close((plus - minus) / 2e-6, d_m[at], atol=1e-7, rtol=1e-6)
    assert d_m[at].abs() > 1e-3


def test_keys_below_the_threshold_get_gradient_only_with_the_surrogate():
    q, k, v, g = tra_inputs(1, 1, 9, 9, 8, seed=3, requires_grad=False)
    q = q.abs()
    k[..., 4, :] = -k[..., 4, :].abs()  # every query scores key 4 below 0: nobody keeps it
    inputs = [t.requires_grad_() for t in (q, k, v, g)]
    weights = torch.randn(1, 1, 9, 8, dtype=torch.float64)
    exact, relaxed = (grads(op(inputs, tau, threshold=0.0), inputs, weights) for tau in (0.0, 1.0))
    assert not keep_mask(scores_of(q, k), 0.0)[..., 4].any()
    assert exact[1][..., 4, :].abs().max() == 0 and exact[2][..., 4, :].abs().max() == 0
    assert relaxed[1][..., 4, :].abs().min() > 0
    assert torch.equal(relaxed[2], exact[2])  # values: the exact gradient (key 4's value is never read)


def test_a_small_temperature_leaves_keys_far_from_the_threshold_with_the_exact_gradient():
    inputs = tra_inputs(1, 2, 12, 12, 8, seed=4)
    causal = causal_mask(12, 12)
    s = scores_of(*inputs[:2])[:, :, causal].flatten().sort().values
    gap = (s[1:] - s[:-1]).argmax()
    threshold = float(s[gap] + s[gap + 1]) / 2  # the middle of the widest gap between two scores
    assert (s - threshold).abs().min() > 0.05
    weights = torch.randn(1, 2, 12, 8, dtype=torch.float64)
    exact = grads(op(inputs, threshold=threshold), inputs, weights)
    for tau, close in ((1e-3, True), (0.5, False)):
        relaxed = grads(op(inputs, tau, threshold=threshold), inputs, weights)
        assert torch.allclose(relaxed[1], exact[1], atol=1e-12, rtol=0) == close


def test_gradients_stay_finite_for_extreme_gates_empty_rows_and_non_finite_inputs():
    q, k, v, g = tra_inputs(1, 2, 15, 15, 8, dtype=torch.float32, seed=5, requires_grad=False)
    g[0, 0] = -1e4  # a dropped key's relaxed weight would be up to exp(1e4) times a kept one's
    k[0, 1, 6, 0] = float("nan")  # rows 6 and on of head 1 are NaN, as in the exact op
    inputs = [t.requires_grad_() for t in (q, k, v, g)]
    assert has_empty_rows(q, k)
    exact, relaxed = op(inputs), op(inputs, tau=0.3)
    assert torch.equal(exact.isnan(), relaxed.isnan()) and torch.equal(exact.nan_to_num(), relaxed.nan_to_num())
    assert relaxed[0, 1, 6:].isnan().all() and not relaxed[0, 1, :6].isnan().any()
    for grad in grads(relaxed.nan_to_num(), inputs, torch.randn_like(relaxed)):
        assert torch.isfinite(grad).all()


def test_rows_with_no_kept_key_output_zero_and_pass_no_gradient():
    q, k, v, g = inputs = tra_inputs(1, 1, 8, 8, 4, seed=6)
    empty = ~keep_mask(scores_of(q, k), 10.0).any(-1)
    assert empty.all()  # a threshold above every score: every row is empty
    out = op(inputs, tau=1.0, threshold=10.0)
    assert torch.equal(out, torch.zeros_like(out))
    assert all(torch.equal(grad, torch.zeros_like(grad)) for grad in grads(out, inputs, torch.randn_like(out)))


@pytest.mark.parametrize("tau", [-0.5, float("nan"), float("inf"), "1", True, None])
def test_bad_temperatures_are_refused(tau):
    inputs = tra_inputs(1, 1, 4, 4, 4)
    with pytest.raises(ValueError, match=r"keep_surrogate = .*; expected a finite temperature >= 0"):
        op(inputs, tau)


# The model: a training option of the thresholded heads; evaluation is the exact op.

CONFIG = dict(vocab_size=13, d_model=32, n_layers=2, n_heads=2)


def test_the_layer_relaxes_in_training_only_and_never_changes_the_values():
    torch.manual_seed(0)
    relaxed = TransformerLM(ModelConfig(**CONFIG, attention_options={"keep_surrogate": 1.0}))
    exact = TransformerLM(ModelConfig(**CONFIG))
    exact.load_state_dict(relaxed.state_dict())
    ids = torch.randint(0, 13, (2, 17))
    torch.testing.assert_close(relaxed.eval()(ids), exact.eval()(ids), atol=0, rtol=0)
    relaxed.train(), exact.train()
    losses = [model(ids).logsumexp(-1).mean() for model in (relaxed, exact)]
    assert torch.equal(losses[0], losses[1])
    (d_relaxed, d_exact) = (
        torch.autograd.grad(loss, model.blocks[0].attn.k_proj.weight) for loss, model in zip(losses, (relaxed, exact))
    )
    assert not torch.allclose(d_relaxed[0], d_exact[0])
    layer = relaxed.blocks[0].attn
    assert isinstance(layer, TRAAttention) and layer.surrogate_temperature(0.0) == 1.0
    assert layer.surrogate_temperature(float("-inf")) == 0.0  # dense heads: nothing to relax
    assert layer.eval().surrogate_temperature(0.0) == 0.0


def test_the_option_its_checks_and_old_versions():
    v5 = {"version": 5, "tra_threshold": 0.0, "tra_impl": "auto", "tra_learned_temperature": False}
    v5 |= {"tra_dense_heads": 0, "tra_threshold_warmup": 0, "gate_bias_init": 0.0}
    v5 |= {k: v for k, v in ModelConfig().to_dict().items() if k not in ("version", "attention_options")}
    v6 = {**v5, "version": 6, "tra_local_window": 0, "tra_dense_window": 0, "tra_keep_surrogate": 0.5}
    for old in (v5, v6):
        with pytest.raises(OldVersion, match=rf"ModelConfig version {old['version']}, written by an earlier version"):
            ModelConfig.from_dict(old)
    assert ModelConfig.from_dict(upgrade_model_config(v5)) == ModelConfig()  # no keep surrogate, no windows
    assert ModelConfig.from_dict(upgrade_model_config(v6)).attention_options.keep_surrogate == 0.5
    for bad in (-1.0, float("inf"), float("nan"), "0.5", True):
        with pytest.raises(ValueError, match=r"TRAOptions\.keep_surrogate = .*; expected a finite number >= 0"):
            ModelConfig(attention_options={"keep_surrogate": bad})
    with pytest.raises(ValueError, match=r"\['keep_surrogate'\] are not options of attention = 'nope'"):
        ModelConfig(**CONFIG, attention="nope", attention_options={"keep_surrogate": 0.5})
    # The ablations without a keep decision to relax, or whose op has no surrogate, refuse it by both names.
    for other, value in (("threshold", "-inf"), ("gate", "'key'")):
        options = {"keep_surrogate": 0.5, other: float(value) if other == "threshold" else "key"}
        pattern = rf"TRAOptions\.keep_surrogate = 0\.5 with TRAOptions\.{other} = {value}; expected keep_surrogate = 0"
        with pytest.raises(ValueError, match=pattern):
            ModelConfig(**CONFIG, attention="tra", attention_options=options)


def test_a_tiny_model_trains_with_the_surrogate_and_saves_it(tmp_path):
    base = dict(task="flipflop", task_args={"p_ignore": 0.8, "final_read": True}, length=16, steps=2, batch_size=4)
    base.update(lr=3e-3, eval_every=0, checkpoint_every=2)
    for name, tau in (("relaxed", 0.5), ("exact", 0.0)):
        model = ModelConfig(vocab_size=6, d_model=16, n_layers=2, n_heads=2, attention_options={"keep_surrogate": tau})
        train(TrainConfig(**base, model=model), tmp_path / name, progress=False)
    relaxed, exact = (
        TransformerLM.from_pretrained(resolve_checkpoint(tmp_path / name)) for name in ("relaxed", "exact")
    )
    assert relaxed.config.attention_options.keep_surrogate == 0.5
    weights = relaxed.state_dict(), exact.state_dict()
    assert all(torch.isfinite(w).all() for w in weights[0].values())
    assert any(not torch.equal(weights[0][name], weights[1][name]) for name in weights[1])


@pytest.mark.parametrize("windows", [(2, 0), (0, 5), (3, 7)])
def test_with_windows_the_values_stay_exact_and_decided_keys_get_the_surrogate(windows):
    local, sliding = windows
    inputs = tuple(t.requires_grad_() for t in tra_inputs(1, 2, 19, 19, 8, dtype=torch.float64, seed=3))
    options = {"local_window": local, "sliding_window": sliding}
    exact, relaxed = op(inputs, **options), op(inputs, tau=0.7, **options)
    assert torch.equal(exact, relaxed)
    weights = torch.randn_like(exact)
    surrogate, plain = grads(relaxed, inputs[:2], weights), grads(exact, inputs[:2], weights)
    assert all(torch.isfinite(g).all() for g in surrogate)
    assert not all(torch.allclose(a, b) for a, b in zip(surrogate, plain))


@pytest.mark.parametrize("windows", [(19, 0), (1, 1), (4, 3)])
def test_keys_the_score_does_not_decide_get_no_surrogate_gradient(windows):
    """Every allowed key inside the local window: no keep decision is relaxed, so the gradient is exact."""
    local, sliding = windows
    inputs = tuple(t.requires_grad_() for t in tra_inputs(1, 2, 19, 19, 8, dtype=torch.float64, seed=4))
    options = {"local_window": local, "sliding_window": sliding}
    weights = torch.randn(1, 2, 19, 8, dtype=torch.float64)
    surrogate = grads(op(inputs, tau=0.7, **options), inputs, weights)
    plain = grads(op(inputs, **options), inputs, weights)
    for a, b in zip(surrogate, plain):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-12)


# The fast paths: the same values, and the materialised surrogate's gradient in O(S) memory (docs/backward.md,
# section 7), with windows, documents and padding, odd lengths, rows with no kept key and logit dropout.

# (name, B, Sq, Sk, local_window, sliding_window, segment ids or None, chunked block)
FAST_CASES = [
    ("plain", 2, 37, 37, 0, 0, None, 8),
    ("decode-chunk", 1, 13, 40, 0, 0, None, 16),
    ("local", 1, 45, 45, 3, 0, None, 16),
    ("sliding", 1, 45, 45, 0, 7, None, 8),
    ("both", 2, 33, 40, 2, 9, None, 8),
    ("documents+padding", 1, 37, 37, 2, 0, torch.tensor([[0] * 10 + [1] * 20 + [-1] * 7], dtype=torch.int32), 8),
    ("left-padding", 2, 23, 23, 0, 0, torch.tensor([[-1] * 6 + [0] * 17, [0] * 23], dtype=torch.int32), 8),
]


def fast_case(case, dtype=torch.float64):
    _, b, sq, sk, local, sliding, seg, block = case
    inputs = tra_inputs(b, 2, sq, sk, 8, dtype=dtype, seed=3)
    with torch.no_grad():
        inputs[0][0, 0, :3] = -inputs[1][0, 0, sk - sq : sk - sq + 3]  # rows that keep no key (threshold 0.25)
    options = {"local_window": local, "sliding_window": sliding, "segment_ids": seg}
    return inputs, options, block


@pytest.mark.parametrize("dropout", [0.0, 0.3], ids=["exact-logits", "dropout"])
@pytest.mark.parametrize("case", FAST_CASES, ids=lambda c: c[0])
def test_chunked_surrogate_equals_the_materialised_one(case, dropout, monkeypatch):
    inputs, options, block = fast_case(case)
    weights = torch.randn_like(inputs[0])
    training = {"logit_dropout": dropout, "dropout_seed": 11}
    expected = grads(op(inputs, 0.7, **options, **training), inputs, weights)
    monkeypatch.setattr(dispatch, "tra_surrogate", None)  # the chunked path must not materialise anything
    monkeypatch.setattr(dispatch, "tra_naive", None)
    keep = KeepRule(THRESHOLD, options["local_window"], options["sliding_window"])
    contract = {"scale": 8**-0.5, "keep": keep, "documents": Documents(options["segment_ids"]), "block_size": block}
    exact, relaxed = (
        tra_chunked(*inputs, **contract, aids=TrainingAids(keep_surrogate=tau, **training)) for tau in (0.0, 0.7)
    )
    assert torch.equal(relaxed, exact)  # the forward is the exact op's, bit for bit
    actual = grads(relaxed, inputs, weights)
    for name, a, e in zip(("dq", "dk", "dv", "dgate"), actual, expected):
        assert_close(a, e, atol=1e-10 * max(1.0, e.abs().max().item()), name=name)
    assert (expected[1] - grads(exact, inputs, weights)[1]).abs().max() > 1e-3  # the surrogate did change dk


def test_the_op_runs_the_surrogate_on_the_chunked_path(monkeypatch):
    inputs = tra_inputs(1, 2, 40, 40, 8, seed=5)
    expected = op(inputs, 0.5, logit_dropout=0.2, dropout_seed=3)
    monkeypatch.setattr(dispatch, "tra_surrogate", None)
    q, k, v, g = inputs
    for impl in ("auto", "chunked"):
        actual = threshold_relative_attention(
            q, k, v, g, threshold=THRESHOLD, impl=impl, keep_surrogate=0.5, logit_dropout=0.2, dropout_seed=3
        )
        assert_close(actual, expected, atol=1e-14)
