"""Shared test helpers: random TRA inputs, a closeness check that reports the worst element, the attention settings
every model test runs (each kind, and the TRA ablations, which are options of the tra kind); and the split of the
suite into the fast subset and the integration tests."""

from __future__ import annotations

import importlib.util
import math
import os
from pathlib import Path

import pytest
import torch

# Without a GPU the Triton kernels run through the Triton interpreter; the variable must be set
# before triton is first imported (the library imports it lazily).
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
import torch.nn.functional as F
from hypothesis import settings

from tra_attn.layers.norms import rms_normalize

# Property tests draw the same examples on every run (a red CI is then a bug, not a draw);
# HYPOTHESIS_PROFILE=explore draws new ones, for a search on a developer's machine.
settings.register_profile("repeatable", derandomize=True, database=None)
settings.register_profile("explore", max_examples=200)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "repeatable"))

TRITON = importlib.util.find_spec("triton") is not None and (
    torch.cuda.is_available() or os.environ.get("TRITON_INTERPRET") == "1"
)
triton_only = pytest.mark.skipif(not TRITON, reason="needs triton with CUDA or TRITON_INTERPRET=1")
# Every implementation of the TRA op, each tested against the reference on the whole contract (a test of fewer
# names them: the PyTorch paths alone, say, where the kernels have their own test).
TRA_IMPLS = ["naive", "chunked", "cpu", pytest.param("triton", marks=triton_only)]


# The fast subset, `python -m pytest -q -m "not integration"` (a few minutes), is the op, the layers, the model, the
# data and the configs on tiny CPU shapes. The integration tests train, run the `tra` command, torchrun, Hugging
# Face, lm-eval, the benchmarks, the committed pages and the Triton interpreter. CI runs both.
TESTS = Path(__file__).parent
INTEGRATION = ("training", "cli", "hf", "experiments", "integration", "benchmarks", "docs")
INTEGRATION_FILES = ("ops/test_triton.py",)


def pytest_collection_modifyitems(config, items):
    for item in items:
        where = Path(str(item.fspath)).resolve().relative_to(TESTS.resolve())
        if where.parts[0] in INTEGRATION or where.as_posix() in INTEGRATION_FILES:
            item.add_marker(pytest.mark.integration)


# The TRA ablations, options of the tra kind, under the names they had as kinds (up to ModelConfig version 7).
TRA_ABLATIONS = {
    "tra_keygate": {"gate": "key"},
    "tra_nothreshold": {"threshold": -math.inf},
    "tra_nodistance": {"distance": False},
}


def attention_settings(kinds) -> list[str]:
    """The names of ``kinds`` (registered kinds), then those of the TRA ablations when ``kinds`` has tra."""
    return [*kinds, *(TRA_ABLATIONS if "tra" in kinds else ())]


def sharing_kinds() -> list[str]:
    """The registered kinds whose default options share parameters across layers (``Attention.shared_parameters``)."""
    from tra_attn import ATTENTION_KINDS

    return [name for name, kind in sorted(ATTENTION_KINDS.items()) if kind.cls.shared_parameters(kind.cls.Options())]


def block_parts(kind: str) -> dict:
    """The ModelConfig fields that give the registered ``kind`` every block part it does not have of its own."""
    from tra_attn import ATTENTION_KINDS

    own = ATTENTION_KINDS[kind].cls.own_block_parts
    return {part: True for part in ("output_gate", "output_norm", "kv_shift") if part not in own}


def attention_fields(name: str, **options) -> dict:
    """The ModelConfig fields of ``name``: a registered kind, or a TRA ablation (``TRA_ABLATIONS``), with
    ``options`` added to its attention options."""
    if name in TRA_ABLATIONS:
        return {"attention": "tra", "attention_options": {**TRA_ABLATIONS[name], **options}}
    return {"attention": name, "attention_options": options}


def tra_inputs(b, h, sq, sk, d, dtype=torch.float64, gate_shift=-1.0, seed=0, requires_grad=True):
    """RMS-normalised q/k (as the TRA layer feeds the op), random v and a logsigmoid gate."""
    gen = torch.Generator().manual_seed(seed)
    q = rms_normalize(torch.randn(b, h, sq, d, generator=gen, dtype=torch.float64), 1e-6)
    k = rms_normalize(torch.randn(b, h, sk, d, generator=gen, dtype=torch.float64), 1e-6)
    v = torch.randn(b, h, sk, d, generator=gen, dtype=torch.float64)
    g = F.logsigmoid(2 * torch.randn(b, h, sq, generator=gen, dtype=torch.float64) + gate_shift)
    out = [q.to(dtype), k.to(dtype), v.to(dtype), g.to(dtype if dtype == torch.float64 else torch.float32)]
    return [t.requires_grad_(requires_grad) for t in out]


def output_and_grads(fn, inputs, grad_out):
    out = fn(*inputs)
    grads = torch.autograd.grad(out, inputs, grad_out)
    return [out, *grads]


def assert_close(actual, expected, atol, rtol=0.0, name=""):
    actual, expected = actual.detach().double(), expected.detach().double()
    assert actual.shape == expected.shape, f"{name}: shape {actual.shape} != {expected.shape}"
    assert torch.isfinite(actual).all(), f"{name}: non-finite values"
    err = (actual - expected).abs()
    bound = atol + rtol * expected.abs()
    worst = (err - bound).argmax()
    got, want = actual.flatten()[worst].item(), expected.flatten()[worst].item()
    assert (err <= bound).all(), (
        f"{name}: max |err| {err.max().item():.3e} (at {worst.item()}: {got:.6g} vs {want:.6g}), "
        f"atol {atol}, rtol {rtol}"
    )


def naive_with_key_start(q, k, v, log_gate, scale, threshold, key_start, local_window=0, sliding_window=0):
    """Naive TRA in which query row r only sees keys j >= key_start[..., r]: what pruning computes."""
    from tra_attn.ops.masks import compute_dtype, masked_softmax
    from tra_attn.ops.tra.naive import keep_mask, reverse_cumsum

    cdt = compute_dtype(q.dtype)
    qc, kc, vc, gc = q.to(cdt), k.to(cdt), v.to(cdt), log_gate.to(cdt)
    scores = scale * (qc @ kc.transpose(-1, -2))
    keys = torch.arange(k.shape[-2])
    keep = keep_mask(scores, threshold, local_window, sliding_window) & (keys >= key_start[..., None])
    count = reverse_cumsum(keep.long()).to(cdt)
    return (masked_softmax(scores + gc[..., None] * count, keep) @ vc).to(q.dtype)
