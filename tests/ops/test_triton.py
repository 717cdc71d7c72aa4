"""The fused Triton kernels against the chunked path: through the Triton interpreter on CPU (CI),
on the GPU when there is one, and compiled ahead of time for sm_90a without one."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import pytest
import torch

from tests.conftest import assert_close, naive_with_key_start, output_and_grads, tra_inputs
from tra_attn import threshold_relative_attention
from tra_attn.ops.tra import KeepRule, tra_chunked
from tra_attn.ops.tra.chunked import chunked_forward_stats
from tra_attn.ops.tra.split_kv import split_kv_attention

triton = pytest.importorskip("triton")
CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
pytestmark = pytest.mark.skipif(
    not CUDA and os.environ.get("TRITON_INTERPRET") != "1", reason="needs CUDA or TRITON_INTERPRET=1"
)
NAMES = ("out", "dq", "dk", "dv", "dgate")
# The interpreter's tl.dot is wrong for bf16 (docs/triton_notes.md): bf16 only on a real GPU.
DTYPES = [torch.float32, torch.float16] + ([torch.bfloat16] if CUDA else [])
TOLERANCE = {torch.float32: 3e-5, torch.float16: 4e-3, torch.bfloat16: 3e-2}


def inputs_on_device(*shape, dtype, **kw):
    return [
        t.detach().to(DEVICE, t.dtype if t.dim() == 3 else dtype).requires_grad_()
        for t in tra_inputs(*shape, dtype=torch.float32, **kw)
    ]


def compare_with_chunked(b, h, sq, sk, d, dtype, threshold=0.0, gate_shift=-1.0, seed=0):
    low = inputs_on_device(b, h, sq, sk, d, dtype=dtype, gate_shift=gate_shift, seed=seed)
    grad_out = torch.randn(b, h, sq, d, device=DEVICE).to(dtype)
    actual = output_and_grads(
        lambda *x: threshold_relative_attention(*x, threshold=threshold, impl="triton"), low, grad_out
    )
    ref_inputs = [t.detach().cpu().double().requires_grad_() for t in low]
    contract = {"scale": d**-0.5, "keep": KeepRule(threshold)}
    expected = output_and_grads(lambda *x: tra_chunked(*x, **contract), ref_inputs, grad_out.cpu().double())
    assert actual[0].dtype == dtype
    for name, a, e in zip(NAMES, actual, expected):
        assert_close(a.cpu(), e, atol=TOLERANCE[dtype] * max(1.0, e.abs().max().item()), name=f"{dtype} {name}")


SHAPES = [(1, 2, 77, 77, 16), (2, 1, 130, 200, 32), (1, 1, 300, 300, 64), (1, 2, 1, 150, 24), (1, 1, 96, 96, 128)]


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}-H{}-Sq{}-Sk{}-D{}".format(*s))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_triton_matches_chunked(shape, dtype):
    compare_with_chunked(*shape, dtype)


@pytest.mark.parametrize("threshold", [0.25, -math.inf])
def test_triton_thresholds(threshold):
    compare_with_chunked(1, 2, 100, 100, 32, torch.float32, threshold=threshold)


# (local_window, sliding_window, segment ids or None): the training options with the keep rule's windows and
# documents with padding.
TRAINING_CASES = {
    "plain": (0, 0, None),
    "windows": (3, 11, None),
    "documents": (2, 0, torch.tensor([[0] * 20 + [1] * 40 + [-1] * 10])),
}


@pytest.mark.parametrize("case", TRAINING_CASES)
@pytest.mark.parametrize(
    "options",
    [{"keep_surrogate": 0.7}, {"logit_dropout": 0.3}, {"keep_surrogate": 0.5, "logit_dropout": 0.2}],
    ids=["surrogate", "dropout", "both"],
)
def test_triton_training_options_match_chunked(case, options):
    """The keep surrogate's gradient and the logit dropout's mask (dropout_seed) in the fused kernels."""
    local, sliding, seg = TRAINING_CASES[case]
    b, h, s, d = 1, 2, 70, 16
    low = inputs_on_device(b, h, s, s, d, dtype=torch.float32, seed=4)
    with torch.no_grad():
        low[0][0, 0, :2] = -low[1][0, 0, :2]  # rows that keep no key
    grad_out = torch.randn(b, h, s, d, device=DEVICE)
    kw = {"threshold": 0.1, "local_window": local, "sliding_window": sliding, "dropout_seed": 21, **options}
    if seg is not None:
        kw["segment_ids"] = seg.to(DEVICE)
    actual = output_and_grads(lambda *x: threshold_relative_attention(*x, impl="triton", **kw), low, grad_out)
    ref_inputs = [t.detach().cpu().double().requires_grad_() for t in low]
    kw["segment_ids"] = seg
    expected = output_and_grads(
        lambda *x: threshold_relative_attention(*x, impl="chunked", **kw), ref_inputs, grad_out.cpu().double()
    )
    for name, a, e in zip(NAMES, actual, expected):
        assert_close(a.cpu(), e, atol=3e-5 * max(1.0, e.abs().max().item()), name=name)


VARIANT_CASES = {  # the keep rule and aids: interior blocks exist in every case but the last two
    "plain": {},
    "local window, high threshold": {"local_window": 3, "threshold": 0.6},
    "surrogate and dropout": {"local_window": 2, "keep_surrogate": 0.5, "logit_dropout": 0.2, "dropout_seed": 5},
    "sliding window": {"sliding_window": 90},
    "documents": {"segment_ids": torch.tensor([[0] * 100 + [1] * 180 + [-1] * 20])},
}


@pytest.mark.parametrize("variant", [{"INTERIOR": True}, {"DOT_SCAN": True}, {"INTERIOR": True, "DOT_SCAN": True}],
                         ids=["interior", "dot-scan", "both"])  # fmt: skip
@pytest.mark.parametrize("case", VARIANT_CASES)
def test_the_opt_in_kernel_variants_compute_the_shipped_values(monkeypatch, case, variant):
    """The interior blocks' own loop and the count as a triangular matmul change the instructions, not the values:
    outputs and gradients bit for bit those of the shipped kernels (which match the chunked path above)."""
    from tra_attn.ops.tra import triton_op

    low = inputs_on_device(1, 2, 300, 300, 16, dtype=torch.float32, seed=6)
    grad_out = torch.randn(1, 2, 300, 16, device=DEVICE)
    kw = {k: v.to(DEVICE) if isinstance(v, torch.Tensor) else v for k, v in VARIANT_CASES[case].items()}
    run = lambda *x: threshold_relative_attention(*x, impl="triton", **kw)  # noqa: E731
    shipped = output_and_grads(run, low, grad_out)
    for name, value in variant.items():
        monkeypatch.setattr(triton_op, name, value)
    for name, a, e in zip(NAMES, output_and_grads(run, low, grad_out), shipped):
        assert torch.equal(a, e), name


def test_naive_chunked_and_triton_drop_the_same_logits():
    q, k, v, g = inputs_on_device(2, 2, 50, 50, 16, dtype=torch.float32, seed=6)
    reference = [t.detach().cpu().double() for t in (q, k, v, g)]
    for seed in (0, 2**40 + 3, torch.tensor(-5)):
        outs = [
            threshold_relative_attention(*x, impl=impl, logit_dropout=0.4, dropout_seed=seed).detach().cpu()
            for impl, x in (("naive", reference), ("chunked", reference), ("triton", (q, k, v, g)))
        ]
        assert_close(outs[1], outs[0], atol=1e-13, name=f"chunked, seed {seed}")
        assert_close(outs[2], outs[0], atol=2e-5, name=f"triton, seed {seed}")
    other = threshold_relative_attention(q, k, v, g, impl="triton", logit_dropout=0.4, dropout_seed=1).cpu()
    assert (other - outs[2]).abs().max() > 0.1  # another seed drops other logits: far beyond the tolerance


def test_triton_rows_with_no_kept_key():
    q, k, v, g = inputs_on_device(1, 2, 64, 64, 16, dtype=torch.float32)
    with torch.no_grad():
        q[:, :, [0, 5, 40]] = 0
    out = threshold_relative_attention(q, k, v, g, impl="triton")
    dq, dk, dv, dg = torch.autograd.grad(out, (q, k, v, g), torch.randn_like(out))
    assert all(torch.isfinite(t).all() for t in (out, dq, dk, dv, dg))
    assert (out[:, :, [0, 5, 40]] == 0).all() and (dq[:, :, [0, 5, 40]] == 0).all()
    assert (dg[:, :, [0, 5, 40]] == 0).all()


@pytest.mark.parametrize("gate_shift", [-4.0, 0.0])
def test_triton_pruning_is_tra_over_the_visited_key_blocks(gate_shift):
    from tra_attn.ops.tra.triton_op import CONFIGS, block_d, forward_stats

    b, h, s, d, tau = 1, 2, 400, 32, 4.0
    q, k, v, g = inputs_on_device(b, h, s, s, d, dtype=torch.float32, gate_shift=gate_shift)
    grad_out = torch.randn(b, h, s, d, device=DEVICE)
    inputs = (q.detach(), k.detach(), v.detach(), g.detach())
    k_start = forward_stats(*inputs, scale=d**-0.5, keep=KeepRule(0.0), prune_tau=tau)[3]
    config = CONFIGS[block_d(d)]
    rows = torch.arange(s, device=DEVICE) // config["fwd"][0]
    key_start = (k_start[:, rows] * config["BN"]).reshape(b, h, s).cpu()
    if gate_shift < 0:
        assert (key_start > 0).any(), "strongly forgetting heads should stop early"
    actual = output_and_grads(
        lambda *x: threshold_relative_attention(*x, impl="triton", prune_tau=tau), [q, k, v, g], grad_out
    )
    ref = [t.detach().cpu().double().requires_grad_() for t in (q, k, v, g)]
    expected = output_and_grads(
        lambda *x: naive_with_key_start(*x, d**-0.5, 0.0, key_start), ref, grad_out.cpu().double()
    )
    for name, a, e in zip(NAMES, actual, expected):
        assert_close(a.cpu(), e, atol=3e-5 * max(1.0, e.abs().max().item()), name=name)
    exact = tra_chunked(*[t.detach().cpu() for t in (q, k, v, g)], scale=d**-0.5, keep=KeepRule(0.0))
    assert (actual[0].cpu() - exact).abs().max() <= 2 * math.exp(-tau) * v.abs().max().item() + 1e-5


def test_split_kv_decode_matches_a_direct_call():
    from tra_attn.ops.tra.triton_op import forward_stats

    q, k, v, g = (t.detach() for t in inputs_on_device(2, 2, 1, 300, 32, dtype=torch.float32))
    direct = threshold_relative_attention(q, k, v, g, impl="triton")
    for n_splits in (1, 4, 7):
        contract = {"scale": 32**-0.5, "keep": KeepRule(0.0), "n_splits": n_splits}
        split = split_kv_attention(q, k, v, g, **contract, forward_stats=forward_stats)
        assert_close(split.cpu(), direct.cpu(), atol=2e-5, name=f"{n_splits} splits")
        cpu = (q.cpu(), k.cpu(), v.cpu(), g.cpu())
        chunked = split_kv_attention(*cpu, **contract, forward_stats=chunked_forward_stats)
        assert_close(chunked, direct.cpu(), atol=2e-5, name=f"chunked, {n_splits} splits")


def test_triton_impl_validation():
    q, k, v, g = tra_inputs(1, 1, 8, 8, 256, requires_grad=False)
    with pytest.raises(ValueError, match=r"q\.shape\[-1\] = 256; expected a head dim D <= 128"):
        threshold_relative_attention(q.to(DEVICE), k.to(DEVICE), v.to(DEVICE), g.to(DEVICE), impl="triton")


@pytest.mark.skipif(not CUDA, reason="needs a GPU")
@pytest.mark.parametrize("d", [64, 128])
def test_gpu_bf16_long_sequences(d):
    compare_with_chunked(2, 4, 2048, 2048, d, torch.bfloat16)


def test_every_shipped_kernel_compiles_for_sm90_without_spills():
    """AOT compilation with the triton wheel's own ptxas: no GPU needed (docs/triton_notes.md)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    proc = subprocess.run(
        [sys.executable, "-m", "tra_attn.ops.tra.triton_aot", "--json", "--quick"],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    rows = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert rows, proc.stderr[-2000:]
    assert {(r["kernel"], r["dtype"], r["D"]) for r in rows} >= {("fwd", "bf16", 128), ("bwd", "fp16", 64)}
    assert {(r["kernel"], r["D"], r["dropout"], r["surrogate"]) for r in rows} >= {
        ("fwd", 64, True, False),
        ("bwd", 128, True, True),
    }
    bad = [r for r in rows if r["problems"]]
    assert not bad, bad
    # wgmma needs 64 rows per program: the D = 128 surrogate backward (32 rows) uses mma (CONFIGS).
    assert all(r["target"] == "sm_90a" and (r["wgmma"] > 0 or r["BM"] < 64) for r in rows)
    assert proc.returncode == 0


def test_public_op_decodes_long_caches_with_split_kv():
    from tra_attn.ops.tra import dispatch

    q, k, v, g = (
        t.detach() for t in inputs_on_device(1, 2, 1, 2 * dispatch.SPLIT_KV_MIN_KEYS + 77, 16, dtype=torch.float32)
    )
    with torch.no_grad():
        assert dispatch._split_kv_decode(q, k, v, g, None)
        out = threshold_relative_attention(q, k, v, g, impl="triton")
    expected = tra_chunked(q.cpu(), k.cpu(), v.cpu(), g.cpu(), scale=0.25, keep=KeepRule(0.0))
    assert_close(out.cpu(), expected, atol=2e-5)
