"""Packed documents and padding (docs/op_contract.md, section 9; docs/varlen.md): every implementation against
the per-sequence reference, forward and backward.

    kept(i, j) = (the rule of sections 2 and 8) and seg[j] == seg[i] and seg[j] >= 0

Each document of a packed call is the op run on that document alone, each row of a padded call (left or right
padding) is the unpadded row, and padding positions output 0 and get zero gradients.
"""

from __future__ import annotations

import math

import pytest
import torch

from tests.conftest import TRA_IMPLS, assert_close, output_and_grads, tra_inputs, triton_only
from tra_attn import threshold_relative_attention
from tra_attn.ops.masks import masked_softmax
from tra_attn.ops.tra import Documents, KeepRule, chunked, tra_chunked, tra_naive
from tra_attn.ops.tra.chunked import chunked_forward_stats
from tra_attn.ops.tra.key_gate import tra_key_gate_naive
from tra_attn.ops.tra.naive import keep_mask, reverse_cumsum
from tra_attn.ops.tra.segments import segments_of
from tra_attn.ops.tra.split_kv import split_kv_attention
from tra_attn.ops.varlen import PADDING, document_starts, segment_ids_from

CUDA = torch.cuda.is_available()
DEVICE = "cuda" if CUDA else "cpu"
NAMES = ("out", "dq", "dk", "dv", "dgate")
BLOCK = 8  # chunked key-block width in these tests: documents end inside blocks and span several


def packed(*lengths, padding=0):
    """(cu_seqlens, key_padding_mask or None, segment ids (1, S)) of documents packed from position 0 and
    ``padding`` positions after them."""
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    total = int(cu[-1]) + padding
    if not padding:
        return cu, None, segment_ids_from(1, total, "cpu", cu_seqlens=cu)
    cu = torch.cat([cu, torch.tensor([total], dtype=torch.int32)])  # the padding as one more document, masked
    mask = torch.ones(1, total, dtype=torch.bool)
    mask[:, total - padding :] = False
    return cu, mask, segment_ids_from(1, total, "cpu", cu_seqlens=cu, key_padding_mask=mask)


def padded(lengths, total, side):
    """(key_padding_mask (B, S), segment ids) of one sequence per row, padded on the left or the right."""
    mask = torch.zeros(len(lengths), total, dtype=torch.long)
    for row, n in enumerate(lengths):
        mask[row, slice(total - n, None) if side == "left" else slice(0, n)] = 1
    return mask, segment_ids_from(len(lengths), total, "cpu", key_padding_mask=mask)


# name: (segment ids (B, Sk), Sq). Documents of length 1, odd lengths ending inside key blocks, many documents,
# trailing padding, left and right padding of unequal rows, and queries after a cache (Sq < Sk).
LAYOUTS = {
    "one-document": (packed(29)[2], 29),
    "length-one-documents": (packed(1, 1, 3, 1, 1, 1, 2)[2], 10),
    "odd-lengths": (packed(7, 1, 13, 3, 11)[2], 35),
    "many-documents": (packed(*[1 + (5 * n) % 4 for n in range(20)])[2], sum(1 + (5 * n) % 4 for n in range(20))),
    "packed-and-padded": (packed(5, 9, padding=4)[2], 18),
    "left-padding": (padded([23, 17, 3], 23, "left")[1], 23),
    "right-padding": (padded([23, 17, 3], 23, "right")[1], 23),
    "decode-packed": (packed(6, 11, 9)[2], 5),
    "decode-left-padding": (padded([21, 12], 21, "left")[1], 4),
}
WINDOWS = [(0, 0), (2, 0), (0, 3), (3, 5)]


def per_document(fn, inputs, seg, grad_out):
    """Output and gradients of ``fn`` run on each document of each row alone, stitched together; zeros at
    padding positions and for documents without a query."""
    q, k, v, g = inputs
    sq, sk = q.shape[2], k.shape[2]
    offset = sk - sq
    result = [torch.zeros_like(t) for t in (q, q, k, v, g)]
    for row in range(seg.shape[0]):
        ids = seg[row]
        for doc in ids[ids >= 0].unique().tolist():
            keys = (ids == doc).nonzero().flatten()
            a, e = int(keys[0]), int(keys[-1]) + 1
            assert len(keys) == e - a, "the reference needs contiguous documents"
            rows = slice(max(a - offset, 0), e - offset)
            if rows.stop <= rows.start:
                continue
            part = [
                t.detach()[row : row + 1, :, span].clone().requires_grad_()
                for t, span in zip(inputs, (rows, slice(a, e), slice(a, e), rows))
            ]
            got = output_and_grads(fn, part, grad_out[row : row + 1, :, rows])
            for target, value, span in zip(result, got, (rows, rows, slice(a, e), slice(a, e), rows)):
                target[row, :, span] = value[0]
    return result


def inputs_for(seg, sq, h=2, d=8, dtype=torch.float64, seed=0, gate_shift=-1.0):
    b, sk = seg.shape
    inputs = tra_inputs(b, h, sq, sk, d, dtype=dtype, seed=seed, gate_shift=gate_shift)
    grad_out = torch.randn(b, h, sq, d, generator=torch.Generator().manual_seed(seed + 1), dtype=torch.float64)
    with torch.no_grad():  # rows with no kept key: zero queries score 0, never above a threshold >= 0
        inputs[0][:, :, sq // 3] = 0
    return inputs, grad_out.to(dtype)


def check_against_documents(run, seg, sq, threshold, windows, dtype=torch.float64, atol=1e-12, **kw):
    """``run(q, k, v, g)`` on the packed or padded inputs equals the op on each document alone (fp64 naive),
    forward and backward; padding positions get 0 and zero gradients."""
    inputs, grad_out = inputs_for(seg, sq, dtype=dtype, **kw)
    actual = output_and_grads(run, inputs, grad_out)
    ref_inputs = [t.detach().double() for t in inputs]
    d = ref_inputs[0].shape[-1]
    lw, sw = windows

    def alone(*x):
        return tra_naive(*x, scale=d**-0.5, keep=KeepRule(threshold, lw, sw))

    expected = per_document(alone, ref_inputs, seg, grad_out.double())
    for name, a, e in zip(NAMES, actual, expected):
        assert_close(a.cpu(), e, atol=atol * max(1.0, e.abs().max().item()), name=name)
    padding_q = (seg[:, seg.shape[1] - sq :] < 0)[:, None].expand(-1, inputs[0].shape[1], -1)
    padding_k = (seg < 0)[:, None].expand_as(inputs[2][..., 0])
    for name, value, padding in zip(NAMES, actual, (padding_q, padding_q, padding_k, padding_k, padding_q)):
        assert (value.cpu()[padding] == 0).all(), f"{name} at padding positions"
    return actual


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("windows", WINDOWS, ids=lambda w: f"local{w[0]}-sliding{w[1]}")
@pytest.mark.parametrize("threshold", [0.0, -math.inf])
@pytest.mark.parametrize("impl", ["naive", "chunked"])
def test_fp64_equals_each_document_alone(impl, layout, windows, threshold):
    seg, sq = LAYOUTS[layout]

    def run(*x):
        if impl == "chunked":  # narrow key blocks: documents end inside blocks and span several
            keep, documents = KeepRule(threshold, *windows), Documents(seg)
            return tra_chunked(*x, scale=x[0].shape[-1] ** -0.5, keep=keep, documents=documents, block_size=BLOCK)
        kw = dict(local_window=windows[0], sliding_window=windows[1])
        return threshold_relative_attention(*x, threshold=threshold, impl=impl, segment_ids=seg, **kw)

    check_against_documents(run, seg, sq, threshold, windows)


@pytest.mark.parametrize("impl", ["naive", "chunked"])
def test_the_three_forms_agree(impl):
    """cu_seqlens, a padding mask, and the segment ids they convert to give the same bits."""
    cu, mask, seg = packed(5, 9, padding=4)
    q, k, v, g = tra_inputs(1, 2, 18, 18, 8, requires_grad=False)
    by_ids = threshold_relative_attention(q, k, v, g, impl=impl, segment_ids=seg)
    assert torch.equal(
        by_ids, threshold_relative_attention(q, k, v, g, impl=impl, cu_seqlens=cu, key_padding_mask=mask)
    )
    mask2, seg2 = padded([18, 11], 18, "left")
    q, k, v, g = tra_inputs(2, 2, 18, 18, 8, requires_grad=False)
    by_mask = threshold_relative_attention(q, k, v, g, impl=impl, key_padding_mask=mask2)
    assert torch.equal(by_mask, threshold_relative_attention(q, k, v, g, impl=impl, segment_ids=seg2))
    assert torch.equal(by_mask, threshold_relative_attention(q, k, v, g, impl=impl, segment_ids=seg2.long()))
    unchecked = threshold_relative_attention(q, k, v, g, impl=impl, key_padding_mask=mask2, validate=False)
    assert torch.equal(by_mask, unchecked)


@pytest.mark.parametrize("impl", TRA_IMPLS)
def test_one_document_is_bit_identical_to_no_segments(impl):
    """A single document covering the sequence takes the segment code paths and changes no bit."""
    seg = packed(37)[2]
    inputs, grad_out = inputs_for(seg, 37, dtype=torch.float32 if impl == "triton" else torch.float64)
    if impl == "triton":
        inputs = [t.detach().to(DEVICE).requires_grad_() for t in inputs]
        grad_out, seg = grad_out.to(DEVICE), seg.to(DEVICE)

    def run(segment_ids):
        if impl == "chunked":  # narrow key blocks: several strips, each inside the one document
            contract = {"scale": 0.3, "keep": KeepRule(local_window=2), "documents": Documents(segment_ids)}
            return lambda *x: tra_chunked(*x, **contract, block_size=BLOCK)
        return lambda *x: threshold_relative_attention(*x, impl=impl, local_window=2, segment_ids=segment_ids)

    plain, one = output_and_grads(run(None), inputs, grad_out), output_and_grads(run(seg), inputs, grad_out)
    for name, a, e in zip(NAMES, one, plain):
        if impl == "triton" and CUDA and name in ("dk", "dv"):  # fp32 atomics: the order of the sums varies
            assert_close(a, e, atol=1e-5 * max(1.0, e.abs().max().item()), name=name)
        else:
            assert torch.equal(a, e), name


def test_padding_inside_a_document_matches_naive():
    """Padding may sit inside a document at the op's level (the model pads only on the left or right): the
    chunked path masks it and still visits the document from its start."""
    seg = torch.tensor([[0, 0, 0, -1, -1, 0, 0, 1, 1, -1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2]], dtype=torch.int32)
    inputs, grad_out = inputs_for(seg, 21)
    for lw, sw in WINDOWS:
        contract = {"scale": 0.3, "keep": KeepRule(0.0, lw, sw), "documents": Documents(seg)}
        expected = output_and_grads(lambda *x, c=contract: tra_naive(*x, **c), inputs, grad_out)
        actual = output_and_grads(lambda *x, c=contract: tra_chunked(*x, **c, block_size=4), inputs, grad_out)
        windows = (lw, sw)
        for name, a, e in zip(NAMES, actual, expected):
            assert_close(a, e, atol=1e-12, name=f"{windows} {name}")


def test_a_padding_query_outputs_zero_and_passes_no_gradient():
    mask, seg = padded([4, 9], 9, "right")
    inputs, grad_out = inputs_for(seg, 9)
    for impl in ("naive", "chunked"):
        for options in ({}, {"local_window": 3}, {"threshold": -math.inf}):
            kw = dict(impl=impl, key_padding_mask=mask, **options)
            out, dq, dk, dv, dg = output_and_grads(
                lambda *x, kw=kw: threshold_relative_attention(*x, **kw), inputs, grad_out
            )
            assert (out[0, :, 4:] == 0).all() and (dq[0, :, 4:] == 0).all() and (dg[0, :, 4:] == 0).all()
            assert (dk[0, :, 4:] == 0).all() and (dv[0, :, 4:] == 0).all()


@pytest.mark.parametrize("layout", ["odd-lengths", "packed-and-padded", "left-padding", "decode-packed"])
def test_keep_surrogate_equals_each_document_alone(layout):
    seg, sq = LAYOUTS[layout]
    inputs, grad_out = inputs_for(seg, sq)
    tau, windows = 0.5, (2, 5)
    kw = dict(threshold=0.1, keep_surrogate=tau, local_window=windows[0], sliding_window=windows[1])
    actual = output_and_grads(lambda *x: threshold_relative_attention(*x, segment_ids=seg, **kw), inputs, grad_out)
    expected = per_document(lambda *x: threshold_relative_attention(*x, **kw), inputs, seg, grad_out)
    for name, a, e in zip(NAMES, actual, expected):
        assert_close(a, e, atol=1e-12, name=name)


def test_logit_dropout_sees_only_the_query_document():
    """With dropout the mask is drawn for the whole (Sq, Sk) logits, so compare two packed calls with the same
    seed: changing every other document's inputs leaves a document's output and gradients unchanged."""
    _, _, seg = packed(6, 9, 7)
    inputs, grad_out = inputs_for(seg, 22)
    other = [t.detach().clone() for t in inputs]
    with torch.no_grad():
        for t in other:
            t[:, :, 6:15] = -torch.rand_like(t[:, :, 6:15]) * 3  # document 1 changed (gate kept <= 0)
    other = [t.requires_grad_() for t in other]

    def run(*x):
        torch.manual_seed(7)
        return threshold_relative_attention(*x, logit_dropout=0.3, segment_ids=seg)

    first, second = output_and_grads(run, inputs, grad_out), output_and_grads(run, other, grad_out)
    rest = torch.tensor([True] * 6 + [False] * 9 + [True] * 7)
    for name, a, e in zip(NAMES, first, second):
        assert torch.equal(a[:, :, rest], e[:, :, rest]), name
    assert not torch.equal(first[0], second[0])


def test_key_gate_ablation_equals_each_document_alone():
    seg, sq = LAYOUTS["left-padding"]
    inputs, grad_out = inputs_for(seg, sq)
    key_gate = -torch.rand(seg.shape[0], 2, seg.shape[1], dtype=torch.float64)
    inputs = [*inputs[:3], key_gate.requires_grad_()]  # Sq = Sk: the gate per key has the query gate's shape
    contract = {"scale": 0.3, "keep": KeepRule(local_window=2)}
    actual = output_and_grads(lambda *x: tra_key_gate_naive(*x, **contract, documents=Documents(seg)), inputs, grad_out)
    expected = per_document(lambda *x: tra_key_gate_naive(*x, **contract), inputs, seg, grad_out)
    for name, a, e in zip(NAMES, actual, expected):
        assert_close(a, e, atol=1e-12, name=name)


def naive_with_segments_and_key_start(q, k, v, log_gate, scale, threshold, key_start, seg, windows=(0, 0)):
    """Naive TRA with the segment rule in which query row r only sees keys j >= key_start[..., r]."""
    scores = scale * (q @ k.transpose(-1, -2))
    keep = keep_mask(scores, threshold, *windows, seg) & (torch.arange(k.shape[-2]) >= key_start[..., None])
    logits = scores + log_gate[..., None] * reverse_cumsum(keep.long()).to(scores)
    return masked_softmax(logits, keep) @ v


@pytest.mark.parametrize("windows", [(0, 0), (2, 40)], ids=["plain", "local2-sliding40"])
def test_chunked_pruning_with_documents_is_tra_over_the_visited_keys(windows):
    """prune_tau with segments: the pruned forward and backward are TRA over the visited keys of the query's
    document, and the output moves by at most 2 exp(-tau) max|v| from the exact packed op."""
    _, mask, seg = packed(70, 3, 45, 60, padding=5)
    sq = seg.shape[1]
    inputs, grad_out = inputs_for(seg, sq, gate_shift=-4.0, d=16)
    scale, tau = 0.25, 3.0
    segments = segments_of(seg, sq)
    contract = {"scale": scale, "keep": KeepRule(0.0, *windows), "block_size": 16, "prune_tau": tau}
    key_start = chunked_forward_stats(*inputs, **contract, segments=segments)[3]
    assert (key_start > document_starts(seg)[:, None]).any(), "strongly forgetting rows should stop early"
    actual = output_and_grads(lambda *x: tra_chunked(*x, **contract, documents=Documents(seg)), inputs, grad_out)
    expected = output_and_grads(
        lambda *x: naive_with_segments_and_key_start(*x, scale, 0.0, key_start, seg, windows), inputs, grad_out
    )
    for name, a, e in zip(NAMES, actual, expected):
        assert_close(a, e, atol=1e-11, rtol=1e-11, name=name)
    keep, documents = KeepRule(0.0, *windows), Documents(seg)
    exact = tra_naive(*(t.detach() for t in inputs), scale=scale, keep=keep, documents=documents)
    assert (actual[0] - exact).abs().max() <= 2 * math.exp(-tau) * inputs[2].abs().max()


def walk(monkeypatch, run):
    """(key blocks walked, sum over the strips of rows x keys scored, run's result): the chunked path's work,
    forward and backward, counted whatever the timing."""
    blocks, area = [], []
    original_blocks, original_logits = chunked._blocks, chunked._Strip.logits

    def counted_blocks(*args):
        for block in original_blocks(*args):
            blocks.append(block)
            yield block

    def counted_logits(self, q_scaled, k_rev, *args, **kw):
        area.append((self.r1 - self.r0) * k_rev.shape[1])
        return original_logits(self, q_scaled, k_rev, *args, **kw)

    monkeypatch.setattr(chunked, "_blocks", counted_blocks)
    monkeypatch.setattr(chunked._Strip, "logits", counted_logits)
    result = run()
    monkeypatch.undo()
    return len(blocks), sum(area), result


def test_chunked_documents_cost_no_work_across_their_boundaries(monkeypatch):
    """Many short documents: the strips hold only the rows of the documents touching their key block, so the
    scored area is about (document length + block) x S instead of S^2 / 2; a single query walks only the key
    blocks of its own document. The results are the per-document ones (forward and backward)."""
    lengths = [13] * 16
    _, _, seg = packed(*lengths)
    s = sum(lengths)
    inputs, grad_out = inputs_for(seg, s, h=1)

    def run(segment_ids, rows=slice(None)):
        q, k, v, g = (t.detach() for t in inputs)
        part = [t.clone().requires_grad_() for t in (q[:, :, rows], k, v, g[:, :, rows])]

        def fn(*x):
            return tra_chunked(*x, scale=0.3, keep=KeepRule(0.0), documents=Documents(segment_ids), block_size=BLOCK)

        return lambda: output_and_grads(fn, part, grad_out[:, :, rows])

    _, whole, _ = walk(monkeypatch, run(None))
    blocks, documents, actual = walk(monkeypatch, run(seg))
    assert whole >= 2 * s * s / 2 and blocks == 2 * math.ceil(s / BLOCK)
    assert documents <= 2 * s * (13 + 2 * BLOCK), (documents, whole)
    expected = per_document(lambda *x: tra_naive(*x, scale=0.3, keep=KeepRule(0.0)), inputs, seg, grad_out)
    for name, a, e in zip(NAMES, actual, expected):
        assert_close(a, e, atol=1e-12, name=name)
    blocks, decode, (out, *_) = walk(monkeypatch, run(seg, rows=slice(s - 1, s)))
    assert blocks == 2 * 2 and decode == 2 * 16  # its document, keys 195-207: blocks [192, 200) and [200, 208)
    assert_close(out, expected[0][:, :, -1:], atol=1e-12)


@pytest.mark.parametrize("windows", [(0, 0), (3, 0), (0, 50)], ids=["plain", "local3", "sliding50"])
@pytest.mark.parametrize("layout", ["packed", "left-padding"])
def test_split_kv_with_documents_is_exact(layout, windows):
    """Split-KV decoding (Sq = 1) against a packed or padded cache: the segments travel into every split with
    the query's document id; fp64 through the chunked statistics against naive."""
    seg = packed(130, 1, 90, 79)[2] if layout == "packed" else padded([300, 171], 300, "left")[1]
    b = seg.shape[0]
    q, k, v, g = tra_inputs(b, 2, 1, 300, 16, requires_grad=False)
    contract = {"scale": 0.25, "keep": KeepRule(0.0, *windows)}
    expected = tra_naive(q, k, v, g, **contract, documents=Documents(seg))
    for n_splits in (1, 4, 7):
        actual = split_kv_attention(
            q, k, v, g, **contract, documents=Documents(seg), n_splits=n_splits, forward_stats=chunked_forward_stats
        )
        assert_close(actual, expected, atol=1e-13, name=f"{n_splits} splits")
    padding_query = seg.clone()
    padding_query[:, -1] = PADDING
    documents = Documents(padding_query)
    out = split_kv_attention(
        q, k, v, g, **contract, documents=documents, n_splits=4, forward_stats=chunked_forward_stats
    )
    assert (out == 0).all()


# Triton through the interpreter (fp32, BN = 32, forward BM = 128, backward BM = 64): small and few.
TRITON_LAYOUTS = {
    "odd-lengths": (packed(7, 1, 40, 3, 19)[2], 70),
    "left-padding": (padded([70, 45], 70, "left")[1], 70),
    "right-padding-decode": (padded([70, 33], 70, "right")[1], 6),
}


@triton_only
@pytest.mark.parametrize("layout", TRITON_LAYOUTS)
@pytest.mark.parametrize("threshold,windows", [(0.0, (0, 0)), (-math.inf, (2, 20))], ids=["plain", "windows"])
def test_triton_equals_each_document_alone(layout, threshold, windows):
    seg, sq = TRITON_LAYOUTS[layout]
    lw, sw = windows

    def run(*x):
        kw = dict(threshold=threshold, local_window=lw, sliding_window=sw)
        out = threshold_relative_attention(*(t.to(DEVICE) for t in x), impl="triton", segment_ids=seg.to(DEVICE), **kw)
        return out.cpu()  # the reference and the output gradient live on the CPU

    check_against_documents(run, seg, sq, threshold, windows, dtype=torch.float32, atol=3e-5, d=16)


@triton_only
def test_triton_skips_key_blocks_left_of_the_documents():
    """The forward's lowest visited key block per query block (KSTART) is the block of the earliest document
    start of its rows: nothing left of it is loaded."""
    from tra_attn.ops.tra.triton_op import CONFIGS, forward_stats

    seg = packed(100, 40, 20, padding=3)[2]
    s, bn = seg.shape[1], CONFIGS[16]["BN"]
    assert CONFIGS[16]["fwd"][0] == 128
    q, k, v, g = (t.float().to(DEVICE) for t in tra_inputs(1, 1, s, s, 16, requires_grad=False))
    k_start = forward_stats(q, k, v, g, scale=0.25, keep=KeepRule(0.0), segments=segments_of(seg.to(DEVICE), s))[3]
    assert k_start.tolist() == [[0, 100 // bn]]  # rows 0-127 start at 0; rows 128-162 at 100 or later
    one = segments_of(seg[:, :160].to(DEVICE), 1)  # a query at position 159, in the document [140, 160)
    last = (q[:, :, :1], k[:, :, :160], v[:, :, :160], g[:, :, :1])
    decode = forward_stats(*last, scale=0.25, keep=KeepRule(0.0), segments=one)
    assert decode[3].tolist() == [[140 // bn]]


@triton_only
def test_triton_pruning_with_documents():
    """The pruned Triton op with segments is TRA over the visited key blocks and stays under the bound."""
    from tra_attn.ops.tra.triton_op import CONFIGS, forward_stats

    seg = packed(150, 3, 100, padding=7)[2]
    s, tau = seg.shape[1], 3.0
    inputs, grad_out = inputs_for(seg, s, dtype=torch.float32, gate_shift=-4.0, d=16)
    inputs = [t.detach().to(DEVICE).requires_grad_() for t in inputs]
    grad_out = grad_out.to(DEVICE)
    segments = segments_of(seg.to(DEVICE), s)
    detached = [t.detach() for t in inputs]
    k_start = forward_stats(*detached, scale=0.25, keep=KeepRule(0.0), segments=segments, prune_tau=tau)[3]
    rows = torch.arange(s) // CONFIGS[16]["fwd"][0]
    key_start = (k_start.cpu()[:, rows] * CONFIGS[16]["BN"]).reshape(1, 2, s)
    assert (key_start > document_starts(seg)[:, None]).any(), "strongly forgetting rows should stop early"
    actual = output_and_grads(
        lambda *x: threshold_relative_attention(
            *x, scale=0.25, impl="triton", prune_tau=tau, segment_ids=seg.to(DEVICE)
        ),
        inputs,
        grad_out,
    )
    ref = [t.detach().cpu().double().requires_grad_() for t in inputs]
    expected = output_and_grads(
        lambda *x: naive_with_segments_and_key_start(*x, 0.25, 0.0, key_start, seg), ref, grad_out.cpu().double()
    )
    for name, a, e in zip(NAMES, actual, expected):
        assert_close(a.cpu(), e, atol=3e-5 * max(1.0, e.abs().max().item()), name=name)
    exact = tra_naive(*(t.detach() for t in ref), scale=0.25, keep=KeepRule(0.0), documents=Documents(seg))
    assert (actual[0].cpu() - exact).abs().max() <= 2 * math.exp(-tau) * ref[2].abs().max() + 1e-5


@triton_only
def test_triton_split_kv_statistics_with_documents():
    from tra_attn.ops.tra.triton_op import forward_stats

    seg = padded([200, 77], 200, "left")[1]
    q, k, v, g = (t.float().to(DEVICE) for t in tra_inputs(2, 2, 1, 200, 16, requires_grad=False))
    contract = {"scale": 0.25, "keep": KeepRule(0.0, local_window=3)}
    expected = tra_naive(*(t.cpu().double() for t in (q, k, v, g)), **contract, documents=Documents(seg))
    for n_splits in (1, 3):
        documents = Documents(seg.to(DEVICE))
        actual = split_kv_attention(
            q, k, v, g, **contract, documents=documents, n_splits=n_splits, forward_stats=forward_stats
        )
        assert_close(actual.cpu(), expected, atol=2e-5, name=f"{n_splits} splits")


@triton_only
def test_public_op_decodes_a_padded_long_cache_with_split_kv():
    from tra_attn.ops.tra import dispatch

    sk = 2 * dispatch.SPLIT_KV_MIN_KEYS + 77
    mask, _ = padded([sk, sk - 1500], sk, "left")
    q, k, v, g = (t.to(DEVICE) for t in tra_inputs(2, 1, 1, sk, 16, dtype=torch.float32, requires_grad=False))
    with torch.no_grad():
        assert dispatch._split_kv_decode(q, k, v, g, None)
        out = threshold_relative_attention(q, k, v, g, impl="triton", key_padding_mask=mask.to(DEVICE))
    expected = threshold_relative_attention(*(t.cpu() for t in (q, k, v, g)), impl="chunked", key_padding_mask=mask)
    assert_close(out.cpu(), expected, atol=2e-5)
    alone = threshold_relative_attention(q[1:], k[1:, :, 1500:], v[1:, :, 1500:], g[1:], impl="triton")
    assert_close(out[1:].cpu(), alone.cpu(), atol=2e-5)


@pytest.mark.parametrize("impl", TRA_IMPLS)
def test_non_finite_entries_stay_in_their_document(impl):
    """A NaN in one document's key poisons only that document's later rows; a NaN at a padding position
    (a key or a padding query) poisons nothing, and the padding query still outputs 0."""
    _, mask, seg = packed(9, 12, padding=4)
    dtype = torch.float32 if impl == "triton" else torch.float64
    device = DEVICE if impl == "triton" else "cpu"
    q, k, v, g = (t.to(device) for t in tra_inputs(1, 2, 25, 25, 8, dtype=dtype, requires_grad=False))
    clean = threshold_relative_attention(q, k, v, g, impl=impl, segment_ids=seg.to(device))
    k2, q2 = k.clone(), q.clone()
    k2[0, 0, 3, 1] = float("nan")  # document 0, head 0, position 3
    k2[0, 1, 23, 0] = float("inf")  # padding key
    q2[0, 1, 22, 0] = float("nan")  # padding query
    out = threshold_relative_attention(q2, k2, v, g, impl=impl, segment_ids=seg.to(device))
    nan_rows = out.isnan().any(-1)
    expected = torch.zeros(1, 2, 25, dtype=torch.bool)
    expected[0, 0, 3:9] = True
    assert torch.equal(nan_rows.cpu(), expected)
    assert torch.equal(out[~nan_rows], clean[~nan_rows])
    assert (out[0, :, 21:] == 0).all()


CU = torch.tensor([0, 3, 8], dtype=torch.int32)
BAD_DOCUMENTS = [
    ({"cu_seqlens": torch.tensor([0, 3, 3, 8], dtype=torch.int32)}, r"cu_seqlens\[1:3\] = \[3, 3\]; expected strictly"),
    ({"cu_seqlens": torch.tensor([1, 3, 8], dtype=torch.int32)}, r"cu_seqlens\[0\] = 1; expected 0"),
    (
        {"cu_seqlens": torch.tensor([0, 3, 7], dtype=torch.int32)},
        r"cu_seqlens\[-1\] = 7; expected the sequence length 8",
    ),
    ({"cu_seqlens": CU.long()}, r"cu_seqlens\.dtype = torch\.int64; expected torch\.int32"),
    ({"cu_seqlens": [0, 3, 8]}, r"cu_seqlens = list; expected a torch\.Tensor"),
    ({"cu_seqlens": CU[None]}, r"cu_seqlens\.shape = \(1, 3\); expected \(N\+1,\)"),
    ({"cu_seqlens": CU[:1]}, r"cu_seqlens\.shape = \(1,\); expected \(N\+1,\) with N >= 1"),
    ({"cu_seqlens": CU, "segment_ids": torch.zeros(1, 8, dtype=torch.int32)}, r"cu_seqlens and segment_ids = both"),
    (
        {"key_padding_mask": torch.ones(1, 7, dtype=torch.bool)},
        r"key_padding_mask\.shape = \(1, 7\); expected \(B, S\)",
    ),
    (
        {"key_padding_mask": torch.tensor([[1, 1, 2, 1, 1, 1, 1, 0]])},
        r"key_padding_mask = values \[0, 1, 2\]; expected",
    ),
    (
        {"key_padding_mask": torch.zeros(1, 8, dtype=torch.bool)},
        r"key_padding_mask\[0\] = all zeros; expected at least",
    ),
    ({"key_padding_mask": torch.ones(1, 8)}, r"key_padding_mask\.dtype = torch\.float32; expected bool or an integer"),
    ({"segment_ids": torch.tensor([[0, 0, 1, 1, 0, 2, 2, 2]])}, r"segment_ids\[0, 4\] = 0; expected non-decreasing"),
    ({"segment_ids": torch.zeros(1, 8)}, r"segment_ids\.dtype = torch\.float32; expected an integer dtype"),
    ({"segment_ids": torch.zeros(2, 8, dtype=torch.int32)}, r"segment_ids\.shape = \(2, 8\); expected \(B, S\)"),
]


@pytest.mark.parametrize("kwargs,pattern", BAD_DOCUMENTS, ids=lambda x: str(x)[:40] if isinstance(x, str) else None)
def test_bad_documents_name_the_argument(kwargs, pattern):
    q, k, v, g = tra_inputs(1, 2, 8, 8, 8, requires_grad=False)
    with pytest.raises(ValueError, match=rf"^threshold_relative_attention: {pattern}"):
        threshold_relative_attention(q, k, v, g, **kwargs)


def test_cu_seqlens_needs_batch_one():
    q, k, v, g = tra_inputs(2, 1, 8, 8, 8, requires_grad=False)
    with pytest.raises(ValueError, match=r"batch size with cu_seqlens = 2; expected 1"):
        threshold_relative_attention(q, k, v, g, cu_seqlens=CU)


def test_validate_false_skips_only_the_value_checks():
    """The model passes validate=False: the reads of the data are skipped, the metadata still checked."""
    q, k, v, g = tra_inputs(1, 2, 8, 8, 8, requires_grad=False)
    unchecked = threshold_relative_attention(
        q, k, v, g, cu_seqlens=torch.tensor([0, 3, 7], dtype=torch.int32), validate=False
    )
    assert unchecked.shape == q.shape
    with pytest.raises(ValueError, match=r"cu_seqlens\.dtype = torch\.int64"):
        threshold_relative_attention(q, k, v, g, cu_seqlens=CU.long(), validate=False)


@pytest.mark.skipif(not CUDA, reason="a wrong device needs a second device")
def test_documents_on_another_device():
    q, k, v, g = (t.cuda() for t in tra_inputs(1, 2, 8, 8, 8, dtype=torch.float32, requires_grad=False))
    with pytest.raises(ValueError, match=r"cu_seqlens\.device = cpu; expected the device of the inputs"):
        threshold_relative_attention(q, k, v, g, cu_seqlens=CU)
