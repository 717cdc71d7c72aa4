"""PaTH attention: positions as accumulated data-dependent Householder-like transforms (Yang, Shen, Wen, Tan,
Mishra, Ren, Panda, Kim, arXiv 2505.16381).

    H_t = I - beta_t w_t w_t^T   (|w_t| = 1, beta_t in (0, 2)),
    s_ij = q_i^T H_i H_{i-1} ... H_{j+1} k_j   for j <= i   (the transforms of positions j < t <= i; s_ii = q_i . k_i)
    out_i = sum_{j <= i} softmax_j(scale * (s_ij + G_i - G_j)) v_j,   G = cumsum(log f)   (the forget gate, optional)

as the authors' naive reference (fla-org/flash-linear-attention, fla/ops/path_attn/naive.py at commit
bc3b101dcb713ddc5bd8924b66754eb68b5ccf89), where ``scale`` multiplies the gate's sum too (their kernel and their
decoding step, ``do_gate_scale=True``, also do: FoX adds log f unscaled, ops/fox.py).

A product of transforms has a compact (UT / WY) form: over positions a..b-1, with W the rows w_t, W_b = diag(beta) W
and T = (I + tril_{-1}(W_b W^T))^{-1} (unit lower triangular), H_{b-1} ... H_a = I - W^T T W_b, and the diagonal
block of T on any contiguous sub-range is that sub-range's own T. ``path_attention`` walks blocks of query rows from
left to right: a block's logits against its own keys come from that form, those against earlier keys from the
queries carried through the block's transforms (q_i^T H_i ... H_a) times the earlier keys carried through every
transform before the block; then the earlier keys and the block's own keys are carried through the block's
transforms. The keys it returns are thus the keys every later query reads (k_j carried through all transforms after
j), what a KV cache stores (the authors' ``prepare_k_cache``): decoding applies the new token's H_t to them, a
rank-one update.

Memory: without autograd (evaluation, decoding) a block holds (block, Sk) logits and the (Sk, D) carried keys, O(S)
for a fixed block; under autograd every block's logits and carried keys are saved, O(S^2) as the materialised
reference (``path_reference``: one block, the (Sq, Sk) logits at once). An O(S)-memory training path needs a
hand-written backward through the transforms (the authors' Triton kernels: a flash-style pass per direction and the
cumulative products' own backward); none here.

In a packed or padded batch (``segment_ids``) padding's transforms are the identity (beta = 0), keys of other
documents are masked, and the gate is zeroed on padding and at each document's first token; documents being
contiguous, every transform between a query and a key of its document is that document's (or padding's).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .autocast import no_autocast
from .masks import compute_dtype, document_positions, dropped_softmax, masked_softmax
from .rows import block_keys, default_row_block, row_blocks


def continues(segment_ids: torch.Tensor) -> torch.Tensor:
    """(B, Sk) bool: the key continues its document (a real token, not the document's first; padding between two
    of its tokens does not count). Elsewhere the forget gate only weighs keys of other documents (zeroed there)."""
    return (segment_ids >= 0) & (document_positions(segment_ids) > 0)


def document_short_conv(x, weight, bias, sq: int, segment_ids: torch.Tensor | None = None) -> torch.Tensor:
    """SiLU of the causal depthwise convolution of ``x`` (B, C, Sk), the inputs of every key (cached ones first), at
    its last ``sq`` positions: (B, C, Sq). ``weight`` (C, K), its last column on the current position (nn.Conv1d's
    weight with causal padding, fla's ``ShortConvolution``); ``bias`` (C,) or None.

    With ``segment_ids`` (B, Sk) a tap reads the lag-th previous real token of the position's own document and zero
    where there is none, as the document alone (zero-padded) reads: nothing crosses a document or comes from padding.
    """
    b, c, sk = x.shape
    width = weight.shape[-1]
    if segment_ids is None:
        start = sk - sq
        lead = min(start, width - 1)
        window = F.pad(x[..., start - lead :], (width - 1 - lead, 0))
        return F.silu(F.conv1d(window, weight[:, None, :], bias, groups=c))
    real = segment_ids >= 0
    rank = real.cumsum(-1) - 1  # index of each real token among its row's real tokens
    positions = torch.arange(sk, device=x.device).expand(b, sk)
    at_rank = torch.zeros(b, sk + 1, dtype=torch.long, device=x.device)  # the position of each rank; sk: padding
    at_rank = at_rank.scatter(1, torch.where(real, rank, sk), positions)
    rank_q, seg_q = rank[:, sk - sq :], segment_ids[:, sk - sq :]
    y = x.new_zeros(b, c, sq)
    for lag in range(width):
        r = rank_q - lag
        src = at_rank.gather(1, r.clamp(min=0))
        ok = (r >= 0) & (seg_q >= 0) & (segment_ids.gather(1, src) == seg_q)
        tap = x.gather(2, src[:, None].expand(b, c, sq)) * ok[:, None].to(x.dtype)
        y = y + weight[:, width - 1 - lag, None] * tap
    return F.silu(y if bias is None else y + bias[:, None])


def path_attention(
    q,
    k,
    v,
    w,
    beta,
    log_fgate: torch.Tensor | None = None,
    *,
    scale: float | None = None,
    logit_dropout: float = 0.0,
    segment_ids: torch.Tensor | None = None,
    block_size: int | None = None,
    carried_keys: bool = True,
):
    """PaTH attention of q (B, H, Sq, D) over k, v (B, H, Sk, D), the queries being the last Sq keys: (out (B, H, Sq,
    D) in q's dtype, keys (B, H, Sk, D) in k's dtype, or None without ``carried_keys``).

    The first Sk - Sq keys come from a cache: already carried through every transform before the queries (the keys
    this function returns). ``w`` (B, H, Sq, D) unit vectors and ``beta`` (B, H, Sq) of the new positions define their
    transforms; ``log_fgate`` (B, H, Sk) <= 0, log f of every key, or None (no forget gate). ``scale``: 1/sqrt(D) by
    default. ``logit_dropout`` drops the final logits (ops/logit_dropout.py). ``segment_ids`` (B, Sk) of the keys, -1
    on padding. ``block_size``: query rows per block (64 by default; Sq: the materialised reference). Computes in fp32
    (fp64 for fp64 inputs), also under an enclosing autocast.
    """
    sq, sk = q.shape[-2], k.shape[-2]
    if w.shape != q.shape or beta.shape != q.shape[:-1] or k.shape[:-2] != q.shape[:-2] or sk < sq:
        raise ValueError(
            f"path_attention: q {tuple(q.shape)}, k {tuple(k.shape)}, w {tuple(w.shape)}, beta {tuple(beta.shape)}; "
            "expected w of q's shape, beta (B, H, Sq) and k (B, H, Sk >= Sq, D)"
        )
    block = int(block_size or default_row_block(sq))
    with no_autocast(q.device):
        return _path_attention(q, k, v, w, beta, log_fgate, scale, logit_dropout, segment_ids, block, carried_keys)


def _path_attention(q, k, v, w, beta, log_fgate, scale, p, segment_ids, block, carried_keys):
    cdt = compute_dtype(q.dtype)
    sq, sk, d = q.shape[-2], k.shape[-2], q.shape[-1]
    past = sk - sq
    scale = d**-0.5 if scale is None else scale
    out_dtype, key_dtype = q.dtype, k.dtype
    q, k, v, w, beta = (t.to(cdt) for t in (q, k, v, w, beta))
    if segment_ids is not None:  # a padding position transforms nothing
        beta = beta.masked_fill(segment_ids[:, None, past:] < 0, 0.0)
    gates = None
    if log_fgate is not None:
        gates = log_fgate if segment_ids is None else log_fgate.masked_fill(~continues(segment_ids)[:, None], 0.0)
        gates = gates.to(cdt).cumsum(-1)
    keys = k[..., :past, :]  # carried through every transform before the current block
    outs = []
    for r0, r1 in row_blocks(sq, block):
        a, e, n = past + r0, past + r1, r1 - r0
        qb, kb, wb = q[..., r0:r1, :], k[..., a:e, :], w[..., r0:r1, :]
        wbeta = beta[..., r0:r1, None] * wb
        eye = torch.eye(n, dtype=cdt, device=q.device)
        t_inv = torch.linalg.solve_triangular(
            torch.tril(wbeta @ wb.mT, -1) + eye, eye, upper=False, unitriangular=True
        )  # T = (I + tril_{-1}(W_b W^T))^{-1}
        qw = torch.tril(qb @ wb.mT)  # q_i . w_t for the block's t <= i
        tm = t_inv @ torch.tril(wbeta @ kb.mT, -1)  # T (beta_t w_t . k_j for t > j)
        local = qb @ kb.mT - qw @ tm  # q_i^T H_i ... H_{j+1} k_j for the block's j <= i
        carried_q = qb - qw @ (t_inv @ wbeta)  # (H_a ... H_i q_i)^T
        logits = torch.cat([carried_q @ keys.mT, local], dim=-1)
        if gates is not None:
            logits = logits + (gates[..., a:e, None] - gates[..., None, :e])
        logits = scale * logits
        _, visible = block_keys(sq, sk, r0, r1, segment_ids, q.device)
        weights = dropped_softmax(logits, visible, p) if p else masked_softmax(logits, visible)
        outs.append(weights @ v[..., :e, :])
        if r1 < sq or carried_keys:  # carry every key so far through the block's transforms
            keys = torch.cat([keys - (keys @ wbeta.mT) @ t_inv.mT @ wb, kb - tm.mT @ wb], dim=-2)
    out = torch.cat(outs, dim=-2) if len(outs) > 1 else outs[0]
    return out.to(out_dtype), (keys.to(key_dtype) if carried_keys else None)


def path_reference(q, k, v, w, beta, log_fgate=None, *, scale=None, logit_dropout=0.0, segment_ids=None):
    """The materialised reference: ``path_attention`` in one block, the (B, H, Sq, Sk) logits at once (and one
    Sq x Sq triangular solve): (out, carried keys)."""
    options = dict(scale=scale, logit_dropout=logit_dropout, segment_ids=segment_ids, block_size=q.shape[-2])
    return path_attention(q, k, v, w, beta, log_fgate, **options)
