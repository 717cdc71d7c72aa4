"""The fused CPU kernels (impl="cpu") against the naive reference, forward and backward: shapes and head dims the
micro-kernels split unevenly, every keep rule, documents and padding, the keep surrogate and the logit dropout, rows
with no kept key, the decoding rows and their non-finite contract, fp32 and bf16, several threads, torch.compile,
and the fallback to the chunked path when the kernels cannot be built."""

from __future__ import annotations

import math
import os
import subprocess
import sys

import pytest
import torch

from tests.conftest import assert_close, output_and_grads, tra_inputs
from tra_attn import threshold_relative_attention
from tra_attn.ops.rms import rms_normalize
from tra_attn.ops.tra import NO_AIDS, NO_DOCUMENTS, KeepRule, TrainingAids, tra_naive
from tra_attn.ops.tra.contract import Documents
from tra_attn.ops.tra.cpu_build import available
from tra_attn.ops.tra.dispatch import Call, cpu_decode_step
from tra_attn.ops.tra.fused_cpu import counting_tiles, tra_cpu
from tra_attn.ops.tra.surrogate import tra_surrogate

pytestmark = pytest.mark.skipif(not available(), reason="the fused CPU kernels could not be built here")
NAMES = ("out", "dq", "dk", "dv", "dgate")
# (B, H, Sq, Sk, D): odd lengths, several query and key blocks, Sq < Sk, the row-by-row path (Sq <= 4), head dims
# below, between and above the micro-kernels' widths (16 fp32 lanes, 8 fp64).
SHAPES = [(2, 3, 37, 37, 16), (1, 2, 130, 130, 64), (1, 1, 70, 150, 5), (2, 1, 3, 50, 24), (1, 2, 200, 200, 33),
          (1, 1, 1, 1, 8), (1, 2, 65, 65, 128), (1, 1, 4, 9, 1)]  # fmt: skip
RULES = [KeepRule(), KeepRule(0.3), KeepRule(-math.inf), KeepRule(local_window=4), KeepRule(-0.2, sliding_window=20),
         KeepRule(local_window=3, sliding_window=40)]  # fmt: skip


def run(impl, keep, documents=None, aids=NO_AIDS):
    documents = Documents() if documents is None else Documents(documents)

    def call(q, k, v, g):
        scale = q.shape[-1] ** -0.5
        if impl == "cpu":
            return tra_cpu(q, k, v, g, scale=scale, keep=keep, documents=documents, aids=aids)
        reference = tra_surrogate if aids.keep_surrogate else tra_naive
        return reference(q, k, v, g, scale=scale, keep=keep, documents=documents, aids=aids)

    return call


def compare(shape, keep, documents=None, aids=NO_AIDS, dtype=torch.float64, atol=1e-11, seed=0):
    b, h, sq, sk, d = shape
    inputs = tra_inputs(b, h, sq, sk, d, dtype=dtype, seed=seed)
    grad_out = torch.randn(b, h, sq, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    expected = output_and_grads(run("naive", keep, documents, aids), inputs, grad_out.to(dtype))
    actual = output_and_grads(run("cpu", keep, documents, aids), inputs, grad_out.to(dtype))
    for name, a, e in zip(NAMES, actual, expected):
        assert_close(a, e, atol=atol, rtol=atol, name=name)


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "B{}-H{}-Sq{}-Sk{}-D{}".format(*s))
@pytest.mark.parametrize("keep", RULES, ids=str)
def test_cpu_matches_naive_fp64(shape, keep):
    compare(shape, keep, seed=sum(shape))


def documents_of(b: int, sk: int) -> torch.Tensor:
    """Three documents per row, the first row's last keys padding (and, in a second row, left padding)."""
    ids = torch.zeros(b, sk, dtype=torch.int32)
    ids[:, sk // 3 :] = 1
    ids[:, 2 * sk // 3 :] = 2
    ids[0, -3:] = -1
    if b > 1:
        ids[1, :4] = -1
    return ids


@pytest.mark.parametrize("shape", [(2, 2, 90, 90, 16), (2, 1, 3, 40, 8), (2, 2, 20, 100, 32)], ids=str)
@pytest.mark.parametrize("keep", RULES[:1] + RULES[3:], ids=str)
def test_documents_and_padding_match_naive(shape, keep):
    compare(shape, keep, documents_of(shape[0], shape[3]), seed=shape[2])


AIDS = [
    TrainingAids(keep_surrogate=0.5),
    TrainingAids(logit_dropout=0.2, dropout_seed=3),
    TrainingAids(keep_surrogate=1.0, logit_dropout=0.3, dropout_seed=5),
]


@pytest.mark.parametrize("aids", AIDS, ids=["surrogate", "dropout", "surrogate+dropout"])
@pytest.mark.parametrize("keep", [KeepRule(), KeepRule(local_window=4), KeepRule(-0.1, 2, 30)], ids=str)
def test_training_aids_match_the_materialised_reference(aids, keep):
    compare((2, 2, 75, 75, 16), keep, aids=aids, seed=11)
    compare((2, 1, 40, 60, 8), keep, documents_of(2, 60), aids=aids, seed=12)


@pytest.mark.parametrize("dtype, atol", [(torch.float32, 2e-4), (torch.bfloat16, 3e-2)], ids=["fp32", "bf16"])
def test_fp32_and_bf16_match_naive(dtype, atol):
    for shape in [(2, 3, 129, 129, 64), (1, 2, 2, 300, 32)]:
        compare(shape, KeepRule(local_window=4), dtype=dtype, atol=atol, seed=shape[2])
        compare(shape, KeepRule(), aids=AIDS[2], dtype=dtype, atol=atol, seed=shape[3])


def test_rows_with_no_kept_key_output_zero_and_pass_no_gradient():
    q, k, v, g = tra_inputs(1, 2, 50, 50, 8, seed=3)
    keep = KeepRule(threshold=10.0)  # above every score of unit-RMS q and k: nothing is kept
    out = tra_cpu(q, k, v, g, scale=8**-0.5, keep=keep)
    assert torch.equal(out, torch.zeros_like(out))
    grads = torch.autograd.grad(out, (q, k, v, g), torch.randn_like(out))
    assert all(torch.equal(t, torch.zeros_like(t)) for t in grads)


FLOORS = {torch.float64: 700.0, torch.float32: 80.0}  # cpu/simd.h: exp of less than -floor is 0


def strong_gates(shape, dtype, seed, weak_row=None):
    """Inputs whose gates forget fast: a key a block of kept keys left of its query has a logit far below the
    exp floor (with one row, ``weak_row``, that never forgets: its block walks to the first key)."""
    b, h, sq, sk, d = shape
    q, k, v, g = tra_inputs(b, h, sq, sk, d, dtype=dtype, seed=seed, requires_grad=False)
    g = -FLOORS[dtype] / 48 * (1 + torch.rand(g.shape, generator=torch.Generator().manual_seed(seed), dtype=g.dtype))
    if weak_row is not None:
        g[..., weak_row] = 0.0
    return [t.requires_grad_() for t in (q, k, v, g)]


def tiles_and_grads(keep, aids, inputs, grad_out):
    with counting_tiles() as tiles:
        results = output_and_grads(run("cpu", keep, aids=aids), inputs, grad_out)
    return tiles(), results


@pytest.mark.parametrize("dtype, atol", [(torch.float64, 1e-11), (torch.float32, 2e-4)], ids=["fp64", "fp32"])
@pytest.mark.parametrize("aids", [NO_AIDS, AIDS[0]], ids=["exact", "surrogate"])
@pytest.mark.parametrize("keep", [KeepRule(), KeepRule(local_window=4), KeepRule(-math.inf)], ids=str)
def test_the_walk_ends_where_no_key_further_left_carries_weight(dtype, atol, aids, keep):
    """Once every row of a block has its logits of every key further left below its running maximum by more than
    the exp floor (a bound from |q| max|k| and the count so far), those keys' weights and gradients are exactly 0
    and the kernels stop walking: fewer tiles than a walk to the first key, the reference's values and
    gradients. A row that never forgets keeps its block walking, and stays exact too."""
    shape = (1, 2, 400, 400, 16)
    grad_out = torch.randn(1, 2, 400, 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    fast = strong_gates(shape, dtype, seed=3)
    slow = strong_gates(shape, dtype, seed=3, weak_row=399)  # the last row: in the last query block
    full = [t.detach().clone().requires_grad_() for t in fast]
    with torch.no_grad():
        full[3].zero_()  # nothing forgets: every walk reaches the first key
    counts = {}
    for name, inputs in (("fast", fast), ("slow", slow), ("full", full)):
        counts[name], actual = tiles_and_grads(keep, aids, inputs, grad_out.to(dtype))
        expected = output_and_grads(run("naive", keep, aids=aids), inputs, grad_out.to(dtype))
        for label, a, e in zip(NAMES, actual, expected):
            assert_close(a, e, atol=atol, rtol=atol, name=f"{name} {label}")
    assert counts["fast"] < counts["slow"] < counts["full"], counts


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["fp64", "fp32"])
def test_a_row_that_keeps_only_the_first_key_walks_to_it(dtype):
    """Rows that have kept nothing yet are never out of reach, however fast they forget: every query keeps only
    key 0, far left, and outputs v_0."""
    s, d = 300, 8
    q = torch.zeros(1, 1, s, d, dtype=dtype)
    q[..., 0] = d**0.5
    k = -q.clone()
    k[:, :, 0] = q[:, :, 0]
    v = torch.randn(1, 1, s, d, generator=torch.Generator().manual_seed(2), dtype=dtype)
    g = torch.full((1, 1, s), -FLOORS[dtype], dtype=dtype)
    inputs = [t.requires_grad_() for t in (q, k, v, g)]
    grad_out = torch.randn(1, 1, s, d, generator=torch.Generator().manual_seed(3), dtype=dtype)
    actual = output_and_grads(run("cpu", KeepRule()), inputs, grad_out)
    expected = output_and_grads(run("naive", KeepRule()), inputs, grad_out)
    tol = 1e-12 if dtype == torch.float64 else 1e-5
    assert_close(actual[0], v[:, :, :1].expand(1, 1, s, d), atol=tol)
    for label, a, e in zip(NAMES, actual, expected):
        assert_close(a, e, atol=tol, rtol=tol, name=label)


def test_the_projection_layout_is_read_in_place_and_kept():
    """q, k, v split into heads from (B, S, H, D) projections, k shared by every head (expanded: a head stride of
    0) and v a slice of a longer buffer: read as they are; the output and each gradient come in their input's
    layout (the output projection and the projections' backward read them without a copy)."""
    b, h, s, d = 2, 3, 90, 16
    gen = torch.Generator().manual_seed(6)
    q = torch.randn(b, s, h, d, generator=gen, dtype=torch.float64).transpose(1, 2).requires_grad_()
    k_shared = torch.randn(b, 1, s, d, generator=gen, dtype=torch.float64).requires_grad_()
    v_buffer = torch.randn(b, h, s + 10, d, generator=gen, dtype=torch.float64).requires_grad_()
    g = torch.nn.functional.logsigmoid(torch.randn(b, h, s, generator=gen, dtype=torch.float64)).requires_grad_()
    grad_out = torch.randn(b, h, s, d, generator=gen, dtype=torch.float64)
    inputs = (q, k_shared, v_buffer, g)

    def call(impl):
        def attention(q, k_shared, v_buffer, g):
            k, v = k_shared.expand(b, h, s, d), v_buffer[:, :, :s]
            return threshold_relative_attention(q, k, v, g, impl=impl, local_window=2)

        return attention

    actual = output_and_grads(call("cpu"), inputs, grad_out)
    expected = output_and_grads(call("naive"), inputs, grad_out)
    assert actual[0].stride() == q.stride()
    for label, a, e in zip(NAMES, actual, expected):
        assert_close(a, e, atol=1e-12, rtol=1e-12, name=label)
    with torch.no_grad():
        out = tra_cpu(q, q, q, g, scale=0.25, keep=KeepRule())
    assert out.stride() == q.stride()


@pytest.mark.parametrize("aids", [NO_AIDS, *AIDS], ids=["exact", "surrogate", "dropout", "surrogate+dropout"])
@pytest.mark.parametrize("shape", [(2, 2, 75, 75, 16), (1, 2, 3, 60, 8), (1, 1, 130, 130, 33)], ids=str)
def test_the_kernels_normalise_q_and_k_as_rms_norm_does(aids, shape):
    """qk_norm_eps: q and k of any scale RMS-normalised in the kernels' passes, forward and backward (through the
    norm), equal to rms_norm then the reference; with documents and windows too."""
    b, h, sq, sk, d = shape
    gen = torch.Generator().manual_seed(sq)
    q = (3 * torch.randn(b, h, sq, d, generator=gen, dtype=torch.float64)).requires_grad_()
    k = (0.2 * torch.randn(b, h, sk, d, generator=gen, dtype=torch.float64)).requires_grad_()
    v = torch.randn(b, h, sk, d, generator=gen, dtype=torch.float64).requires_grad_()
    g = torch.nn.functional.logsigmoid(torch.randn(b, h, sq, generator=gen, dtype=torch.float64)).requires_grad_()
    grad_out = torch.randn(b, h, sq, d, generator=gen, dtype=torch.float64)
    documents = Documents(documents_of(b, sk))
    keep = KeepRule(-0.1, local_window=2, sliding_window=50)

    def fused(q, k, v, g):
        return tra_cpu(q, k, v, g, scale=d**-0.5, keep=keep, documents=documents, aids=aids, norm_eps=1e-6)

    def reference(q, k, v, g):
        q, k = rms_normalize(q, 1e-6), rms_normalize(k, 1e-6)
        run_reference = tra_surrogate if aids.keep_surrogate else tra_naive
        return run_reference(q, k, v, g, scale=d**-0.5, keep=keep, documents=documents, aids=aids)

    actual = output_and_grads(fused, (q, k, v, g), grad_out)
    expected = output_and_grads(reference, (q, k, v, g), grad_out)
    for label, a, e in zip(NAMES, actual, expected):
        assert_close(a, e, atol=1e-10, rtol=1e-10, name=label)


def test_gradcheck_fp64():
    inputs = tra_inputs(1, 2, 9, 12, 3, seed=5)
    keep = KeepRule(local_window=2)
    assert torch.autograd.gradcheck(lambda *x: tra_cpu(*x, scale=0.5, keep=keep), inputs)


@pytest.mark.parametrize("heads", [1, 8])
def test_thread_counts_agree(heads):
    """Several threads over few heads add every query block's dK and dV in private buffers (summed after);
    over many heads each head's blocks are one thread's: both equal one thread's result."""
    inputs = tra_inputs(1, heads, 150, 150, 16, seed=heads)
    grad_out = torch.randn(1, heads, 150, 16, dtype=torch.float64)
    call = run("cpu", KeepRule(local_window=4), aids=AIDS[0])
    previous = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = output_and_grads(call, inputs, grad_out)
        torch.set_num_threads(2)
        two = output_and_grads(call, inputs, grad_out)
    finally:
        torch.set_num_threads(previous)
    for name, a, e in zip(NAMES, two, one):
        assert_close(a, e, atol=1e-12, rtol=1e-12, name=name)


def test_keys_and_values_are_read_in_place_from_a_longer_cache():
    q, k, v, g = tra_inputs(2, 3, 1, 64, 16, requires_grad=False, seed=9)
    buffer_k, buffer_v = (
        torch.zeros(2, 3, 100, 16, dtype=torch.float64),
        torch.zeros(2, 3, 100, 16, dtype=torch.float64),
    )
    buffer_k[:, :, :64], buffer_v[:, :, :64] = k, v
    cached = threshold_relative_attention(q, buffer_k[:, :, :64], buffer_v[:, :, :64], g, impl="cpu")
    assert_close(cached, threshold_relative_attention(q, k, v, g, impl="naive"), atol=1e-12)


@pytest.mark.parametrize("layout", ["cache-slice", "one-head", "one-row", "transposed", "bf16"])
def test_a_decoding_step_reads_every_layout_of_keys_and_values(layout):
    """The step reads the (S, D) blocks of each (b, h) in place where their rows are contiguous, with one stride
    between blocks (a cache slice; one head, whose blocks are the batch rows), and copies any other layout."""
    b, h = {"one-head": (3, 1), "one-row": (1, 1)}.get(layout, (2, 3))
    q, k, v, g = tra_inputs(b, h, 1, 40, 8, requires_grad=False, seed=4)
    if layout == "cache-slice":
        k, v = (torch.cat([t, torch.zeros_like(t)], dim=2)[:, :, :40] for t in (k, v))
    if layout == "transposed":  # (B, S, H, D) memory, as a projection's output before the heads are split
        k, v = (t.transpose(1, 2).contiguous().transpose(1, 2) for t in (k, v))
    dtype, atol = (torch.bfloat16, 2e-2) if layout == "bf16" else (torch.float64, 1e-12)
    q, k, v = (t.to(dtype) for t in (q, k, v))
    step = cpu_decode_step(q, k, v, g, step_call(scale=8**-0.5, keep=KeepRule(0.1, local_window=2)), "cpu")
    expected = tra_naive(q.double(), k.double(), v.double(), g, scale=8**-0.5, keep=KeepRule(0.1, local_window=2))
    assert step.dtype == dtype
    assert_close(step.double(), expected, atol=atol, rtol=atol)


NO_RULE = KeepRule()


def step_call(scale: float = 1.0, keep: KeepRule = NO_RULE, **changes) -> Call:
    """A decoding step's contract, as the op builds it."""
    return Call(scale, keep, NO_DOCUMENTS, NO_AIDS, None)._replace(**changes)


def test_the_decoding_step_serves_only_decoding_steps_on_the_kernels():
    q, k, v, g = tra_inputs(1, 2, 2, 30, 8, requires_grad=False, seed=5)
    one = (q[:, :, -1:], k, v, g[:, :, -1:])
    assert cpu_decode_step(*one, step_call(), "cpu") is not None
    assert cpu_decode_step(q, k, v, g, step_call(), "cpu") is None  # two queries
    assert cpu_decode_step(*one, step_call(), "chunked") is None
    assert cpu_decode_step(*one, step_call(keep=KeepRule(sliding_window=4)), "cpu") is None
    assert cpu_decode_step(*one, step_call(aids=TrainingAids(logit_dropout=0.1)), "cpu") is None
    assert cpu_decode_step(*one, step_call(qk_norm_eps=1e-6), "cpu") is None  # the kernels' forward normalises
    packed = Documents(torch.zeros(1, 30, dtype=torch.int32))
    assert cpu_decode_step(*one, step_call(documents=packed), "cpu") is None
    assert cpu_decode_step(q[:, :, -1:].requires_grad_(), k, v, g[:, :, -1:], step_call(), "cpu") is None


BAD = {"nan": math.nan, "inf": math.inf, "ninf": -math.inf}


@pytest.mark.parametrize("where", ["clean", "q-nan", "key-inf", "value-nan", "gate-ninf", "later-value-nan"])
def test_a_decoding_step_applies_the_nonfinite_contract_in_its_rows(where):
    """One query per row, no documents: the kernel's rows are NaN exactly where the contract says (the
    reference's, on sanitised inputs), with no pass over the cache beforehand."""
    q, k, v, g = tra_inputs(2, 3, 1, 90, 8, requires_grad=False, seed=7)
    targets = {"q": (q, (0, 1, 0, 3)), "key": (k, (0, 1, 30, 2)), "value": (v, (1, 2, 50, 5)),
               "gate": (g, (0, 1, 0)), "later-value": (v, (0, 0, 89, 1))}  # fmt: skip
    if where != "clean":
        name, _, value = where.rpartition("-")
        tensor, index = targets[name]
        tensor[index] = BAD[value]
    with torch.no_grad():
        out = threshold_relative_attention(q, k, v, g, local_window=2, impl="cpu", validate=False)
        expected = threshold_relative_attention(q, k, v, g, local_window=2, impl="naive", validate=False)
    assert torch.equal(torch.isnan(out), torch.isnan(expected)), where
    assert torch.isnan(out).any() == (where != "clean")
    finite = ~torch.isnan(expected)
    assert_close(out[finite], expected[finite], atol=1e-13)


@pytest.mark.parametrize("chosen", [True, False], ids=["faster", "slower"])
def test_auto_runs_the_fused_kernels_where_they_are_chosen(monkeypatch, chosen):
    """auto runs the kernels where cpu_choice chose them (tests/ops/test_cpu_choice.py measures), else chunked."""
    import tra_attn.ops.tra.dispatch as dispatch

    calls = []
    monkeypatch.setattr(dispatch, "cpu_kernels_chosen", lambda: chosen)
    monkeypatch.setattr(dispatch, "tra_cpu", lambda *a, **kw: calls.append("tra_cpu") or tra_cpu(*a, **kw))
    q, k, v, g = tra_inputs(1, 2, 20, 20, 8, seed=1)
    threshold_relative_attention(q, k, v, g)
    assert calls == (["tra_cpu"] if chosen else [])
    if not chosen:
        return
    with pytest.raises(ValueError, match="prune_tau = 5.0; expected None for impl='cpu'"):
        threshold_relative_attention(q, k, v, g, impl="cpu", prune_tau=5.0)
    threshold_relative_attention(q, k, v, g, prune_tau=5.0)  # auto: the chunked path's early exit
    assert calls == ["tra_cpu"]


def test_compiled_with_no_graph_break():
    q, k, v, g = tra_inputs(1, 2, 40, 40, 16, dtype=torch.float32, seed=2)
    compiled = torch.compile(lambda *x: threshold_relative_attention(*x, impl="cpu", validate=False), fullgraph=True)
    out = compiled(q, k, v, g)
    out.sum().backward()
    assert_close(out, threshold_relative_attention(q, k, v, g, impl="naive"), atol=2e-5)
    assert q.grad is not None and torch.isfinite(q.grad).all()


FALLBACK = """
import torch
from tra_attn import threshold_relative_attention
from tra_attn.ops.tra.cpu_build import library
q = torch.randn(1, 2, 10, 8)
out = threshold_relative_attention(q, q, q, -torch.rand(1, 2, 10), impl="cpu")
print("library", library())
"""


@pytest.mark.parametrize("env", [{"CXX": "/nonexistent/g++"}, {"TRA_CPU_KERNELS": "0"}], ids=["no-compiler", "off"])
def test_without_the_kernels_the_op_runs_on_the_chunked_path(env, tmp_path):
    """No compiler (or the kernels switched off): the op still runs, and says why once, on stderr."""
    environ = {**os.environ, "TRA_CPU_KERNELS_DIR": str(tmp_path), **env}
    done = subprocess.run([sys.executable, "-c", FALLBACK], capture_output=True, text=True, env=environ, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "library None" in done.stdout
    if "CXX" in env:
        assert done.stderr.count("the chunked PyTorch path") == 1
        assert "/nonexistent/g++" in done.stderr
    else:
        assert done.stderr == ""


@pytest.mark.parametrize("impl", ["naive", "chunked", "cpu", "auto"])
def test_every_implementation_normalises_q_and_k_alike(impl):
    """The op's qk_norm_eps: the kernels normalise in their passes, every other path calls rms_norm first."""
    gen = torch.Generator().manual_seed(8)
    q, k = (5 * torch.randn(1, 2, 70, 8, generator=gen, dtype=torch.float64) for _ in range(2))
    v = torch.randn(1, 2, 70, 8, generator=gen, dtype=torch.float64)
    g = -torch.rand(1, 2, 70, generator=gen, dtype=torch.float64)
    out = threshold_relative_attention(q, k, v, g, impl=impl, qk_norm_eps=1e-5)
    expected = threshold_relative_attention(rms_normalize(q, 1e-5), rms_normalize(k, 1e-5), v, g, impl="naive")
    assert_close(out, expected, atol=1e-12, rtol=1e-12)
    one = threshold_relative_attention(q[:, :, -1:], k, v, g[:, :, -1:], impl=impl, qk_norm_eps=1e-5)  # decoding
    assert_close(one, expected[:, :, -1:], atol=1e-12, rtol=1e-12)
