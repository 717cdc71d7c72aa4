"""Padded and packed batches in the model, for every attention kind: each document computes what it computes
alone (outputs and losses, to 1e-5 in fp32), labels never cross a document boundary, left-padded prompts
decode like each prompt alone (with and without the KV cache), and bad descriptions get clear errors
(docs/padding_and_packing.md)."""

from __future__ import annotations

import pytest
import torch

from tests.conftest import attention_fields, attention_settings, block_parts
from tra_attn import ATTENTION_KINDS, AttentionKind, ModelConfig, TransformerLM, register_attention
from tra_attn.layers import Attention, unregister_attention
from tra_attn.ops.causal import causal_sdpa
from tra_attn.ops.masks import document_mask, document_positions

# Every kind (and the TRA ablations, options of tra), and TRA with a threshold also with the keep rule's windows and
# a dense head.
WINDOWS = {"attention_options": {"local_window": 2, "dense_heads": 1, "dense_window": 3}}
KINDS = attention_settings(sorted(ATTENTION_KINDS))  # the built-in kinds (read before any test registers one)
CASES = [(kind, {}) for kind in KINDS] + [(kind, WINDOWS) for kind in ("tra", "tra_keygate", "tra_nodistance")]
# The kinds with randomized positions, drawn at evaluation too: a draw per sequence, whatever its row.
DRAWN = {"attention_options": {"random_positions": 64, "random_positions_at_eval": True}}
DRAWING = ("alibi", "fire", "kerple", "rope", "t5")
CASES += [(kind, DRAWN) for kind in DRAWING]
# Every kind with the block parts it does not have of its own (layers/block_parts.py).
BLOCK = {"output_gate": True, "output_norm": True, "kv_shift": True}
CASES += [(kind, block_parts(kind)) for kind in sorted(ATTENTION_KINDS) if block_parts(kind)]
LENGTHS = (5, 3, 7)  # three documents
TOL = dict(atol=1e-5, rtol=1e-5)


def tolerance(kind: str, options: dict) -> dict:
    """TOL, or 1e-4 where the output norm meets softpick, whose heads can attend to nothing: the norm then divides
    fp32 rounding by an output near zero (in fp64 the same comparison agrees to 1e-13)."""
    return dict(atol=1e-4, rtol=1e-4) if kind == "softpick" and options.get("output_norm") else TOL


def case_id(case):
    if isinstance(case, str):
        return case
    return "windows" if case == WINDOWS else "drawn" if case == DRAWN else "block" if case else ""


def tiny(kind, **options) -> TransformerLM:
    """A small model of ``kind`` (a kind, or a TRA ablation's name) with these ModelConfig fields."""
    torch.manual_seed(0)
    attention = attention_fields(kind, **options.pop("attention_options", {}))
    config = ModelConfig(vocab_size=13, d_model=32, n_layers=2, n_heads=4, **attention, **options)
    return TransformerLM(config).eval()


def documents(seed: int = 1) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Token ids and (already shifted) labels of three documents of LENGTHS."""
    gen = torch.Generator().manual_seed(seed)
    ids = [torch.randint(0, 13, (n,), generator=gen) for n in LENGTHS]
    labels = [torch.randint(0, 13, (n,), generator=gen) for n in LENGTHS]
    return ids, labels


def padded(rows: list[torch.Tensor], side: str, fill: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """(B, max length) ids padded with ``fill`` on ``side`` and their attention mask."""
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), fill, dtype=torch.long)
    mask = torch.zeros(len(rows), width, dtype=torch.long)
    for i, r in enumerate(rows):
        cols = slice(width - len(r), width) if side == "left" else slice(0, len(r))
        ids[i, cols], mask[i, cols] = r, 1
    return ids, mask


def test_document_positions_and_masks():
    seg = torch.tensor([[-1, -1, 0, 0, 0], [0, 0, 1, 1, 1], [4, 4, 4, -1, -1]], dtype=torch.int32)
    assert document_positions(seg).tolist() == [[0, 0, 0, 1, 2], [0, 1, 0, 1, 2], [0, 1, 2, 0, 0]]
    visible = document_mask(seg, 5)[:, 0].int()
    assert visible[0].tolist() == [[1, 0, 0, 0, 0], [0, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 1, 1, 1]]
    assert visible[1].tolist() == [[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [0, 0, 1, 0, 0], [0, 0, 1, 1, 0], [0, 0, 1, 1, 1]]
    assert document_mask(seg, 2)[1, 0].int().tolist() == [[0, 0, 1, 1, 0], [0, 0, 1, 1, 1]]  # decoding: last rows


@pytest.mark.parametrize("kind,options", CASES, ids=case_id)
def test_padded_and_packed_batches_compute_each_document_alone(kind, options):
    model = tiny(kind, **options)
    ids, labels = documents()
    with torch.no_grad():
        alone = [model(x[None])[0] for x in ids]
        alone_loss = [model(x[None], labels=y[None])[0] for x, y in zip(ids, labels)]
        for side in ("left", "right"):
            batch, mask = padded(ids, side, fill=10_000)  # a pad id outside the vocabulary is never read
            targets, _ = padded(labels, side, fill=-100)
            logits = model(batch, attention_mask=mask)
            loss = model(batch, labels=targets, attention_mask=mask)
            for i, n in enumerate(LENGTHS):
                real = mask[i].bool()
                torch.testing.assert_close(logits[i, real], alone[i], **TOL)
                assert torch.all(loss[i, ~real] == 0)  # padding is never scored
                # the last token's target is padding unless it ends the row
                ends_row = side == "left" or n == max(LENGTHS)
                expected = alone_loss[i] if ends_row else torch.cat([alone_loss[i][:-1], torch.zeros(1)])
                torch.testing.assert_close(loss[i, real], expected, **TOL)

        # cu_seqlens: the three documents in one row; segment_ids: two rows, one left-padded, one right-padded
        packed, targets = torch.cat(ids)[None], torch.cat(labels)[None]
        cu = torch.tensor([0, 5, 8, 15], dtype=torch.int32)
        seg = torch.tensor([[-1] * 7 + [0] * 5 + [1] * 3, [2] * 7 + [-1] * 8], dtype=torch.int32)
        rows = torch.zeros(2, 15, dtype=torch.long)
        rows[0, 7:], rows[1, :7] = packed[0, :8], ids[2]
        row_labels = torch.full((2, 15), -100)
        row_labels[0, 7:], row_labels[1, :7] = targets[0, :8], labels[2]
        for got, loss, where in (
            (model(packed, cu_seqlens=cu), model(packed, labels=targets, cu_seqlens=cu), [(0, 0), (0, 5), (0, 8)]),
            (model(rows, segment_ids=seg), model(rows, labels=row_labels, segment_ids=seg), [(0, 7), (0, 12), (1, 0)]),
        ):
            for doc, (row, start) in enumerate(where):
                n = LENGTHS[doc]
                torch.testing.assert_close(got[row, start : start + n], alone[doc], **TOL)
                # a document's last label targets the next document's first token (or padding): ignored, unless
                # the document ends the row, whose last target lies past it
                ends_row = start + n == got.shape[1]
                expected = alone_loss[doc] if ends_row else torch.cat([alone_loss[doc][:-1], torch.zeros(1)])
                torch.testing.assert_close(loss[row, start : start + n], expected, **TOL)
        assert torch.all(model(rows, labels=row_labels, segment_ids=seg)[seg < 0] == 0)


@pytest.mark.parametrize("kind", KINDS)
def test_a_padded_batch_trains_with_finite_gradients(kind):
    """Padding queries attend to nothing real: no NaN reaches the loss or the gradients (logit dropout too)."""
    model = tiny(kind, attention_dropout=0.1).train()
    ids, labels = documents()
    batch, mask = padded(ids, "left")
    targets, _ = padded(labels, "left", fill=-100)
    model(batch, labels=targets, attention_mask=mask).sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("kind,options", CASES, ids=case_id)
def test_left_padded_prompts_generate_what_each_prompt_alone_generates(kind, options):
    model = tiny(kind, **options)
    with torch.no_grad():  # sharpen the model so that greedy choices are far from ties
        model.lm_head.weight.mul_(20)
    prompts, _ = documents(seed=2)
    batch, mask = padded(prompts, "left", fill=10_000)  # a pad id outside the vocabulary: never read
    width = batch.shape[1]
    for use_cache in (True, False):
        out = model.generate(batch, 6, temperature=0, use_cache=use_cache, attention_mask=mask)
        assert torch.equal(out[:, :width], batch)
        for i, prompt in enumerate(prompts):
            alone = model.generate(prompt[None], 6, temperature=0, use_cache=use_cache)[0]
            assert torch.equal(out[i, width - len(prompt) :], alone), (use_cache, i)
    if model.draws_positions_at_eval:  # generate decoded by full forwards; a forward with a cache is refused
        with pytest.raises(ValueError, match=r"random_positions_at_eval: a forward with a KV cache; expected none"):
            model(batch, cache=model.new_cache(), attention_mask=mask)
        return
    # the logits of every decoding step, not only their argmax: the cache masks the padding exactly
    cache = model.new_cache()
    with torch.no_grad():
        steps = [model(batch, cache=cache, attention_mask=mask)[:, -1]]
        steps += [model(out[:, t : t + 1], cache=cache)[:, -1] for t in range(width, out.shape[1] - 1)]
        for i, prompt in enumerate(prompts):
            alone = model(out[i : i + 1, width - len(prompt) :])[0, len(prompt) - 1 : -1]
            torch.testing.assert_close(torch.stack([step[i] for step in steps]), alone, **tolerance(kind, options))


@pytest.mark.parametrize("kind", ["rope", "fox"])
def test_a_padded_prompt_prefilled_in_chunks_continues_like_one_forward(kind):
    """The cache keeps the segment ids: later chunks (with or without their own mask) continue each row."""
    model = tiny(kind).double()
    batch, mask = padded(documents()[0], "left")
    full = model(batch, attention_mask=mask)
    cache = model.new_cache()
    parts = [model(batch[:, :5], cache=cache, attention_mask=mask[:, :5]), model(batch[:, 5:6], cache=cache)]
    parts.append(model(batch[:, 6:], cache=cache, attention_mask=mask[:, 6:]))
    assert cache.segment_ids.shape == (3, 7)
    real = mask.bool()
    torch.testing.assert_close(torch.cat(parts, dim=1)[real], full[real], atol=1e-12, rtol=1e-12)


def test_a_mask_without_padding_is_the_plain_forward_and_keeps_the_cache_plain():
    model = tiny("rope")
    ids = torch.randint(0, 13, (2, 6))
    cache = model.new_cache()
    assert torch.equal(model(ids, attention_mask=torch.ones_like(ids), cache=cache), model(ids))
    assert cache.segment_ids is None
    seg = torch.full((1, 6), 3)
    assert torch.equal(model(ids[:1], segment_ids=seg), model(ids[:1]))


BAD = [
    ({"attention_mask": torch.ones(2, 5)}, r"attention_mask\.shape = \(2, 5\); expected \(B, S\) = \(2, 6\)"),
    ({"attention_mask": torch.ones(2, 6)}, r"attention_mask\.dtype = torch\.float32; expected bool or an integer"),
    ({"attention_mask": torch.full((2, 6), 2)}, r"attention_mask = values \[2\]; expected only 1 \(token\) and 0"),
    (
        {"attention_mask": torch.tensor([[1] * 6, [0] * 6])},
        r"attention_mask\[1\] = all zeros; expected at least one real token",
    ),
    (
        {"attention_mask": torch.tensor([[1] * 6, [1, 1, 0, 0, 1, 1]])},
        r"attention_mask\[1\] has padding between real tokens \(real/padding 110011\); expected left or right padding",
    ),
    (
        {"segment_ids": torch.tensor([[0, 0, 1, 1, 2, 2], [0, 0, -1, 1, 1, 1]])},
        r"segment_ids\[1\] has padding between real tokens",
    ),
    ({"segment_ids": torch.tensor([[0] * 6, [-1] * 6])}, r"segment_ids\[1\] is all padding; expected at least one"),
    ({"segment_ids": torch.tensor([[0, 0, 1, 1, 0, 0]] * 2)}, r"segment_ids\[0, 4\] = 0; expected non-decreasing"),
    (
        {"cu_seqlens": torch.tensor([0, 6], dtype=torch.int32)},
        r"batch size with cu_seqlens = 2; expected 1 \(documents are concatenated",
    ),
    (
        {"cu_seqlens": torch.tensor([0, 6], dtype=torch.int32), "segment_ids": torch.zeros(2, 6, dtype=torch.long)},
        r"cu_seqlens and segment_ids = both given; expected at most one",
    ),
]


@pytest.mark.parametrize("kwargs,pattern", BAD)
def test_bad_documents_get_clear_errors(kwargs, pattern):
    model = tiny("nope")
    with pytest.raises(ValueError, match="TransformerLM: " + pattern):
        model(torch.randint(0, 13, (2, 6)), **kwargs)


def test_generate_asks_for_left_padding():
    model = tiny("nope")
    ids = torch.randint(0, 13, (2, 4))
    with pytest.raises(ValueError, match=r"generate: attention_mask\[1, -1\] = 0; expected left padding"):
        model.generate(ids, 2, attention_mask=torch.tensor([[1, 1, 1, 1], [1, 1, 1, 0]]))
    with pytest.raises(ValueError, match=r"generate: attention_mask\.shape = \(2, 3\); expected \(B, S\) = \(2, 4\)"):
        model.generate(ids, 2, attention_mask=torch.ones(2, 3, dtype=torch.long))


@pytest.mark.parametrize("kind", KINDS)
def test_a_packed_forward_has_no_graph_breaks(kind):
    """Under torch.compile the checks that read the data are skipped, so packing costs no graph break."""
    model = TransformerLM(ModelConfig(vocab_size=13, d_model=32, n_layers=2, n_heads=4, **attention_fields(kind)))
    ids = torch.randint(0, 13, (2, 17))
    seg = torch.tensor([[0] * 9 + [1] * 8, [-1] * 3 + [2] * 14])
    torch._dynamo.reset()
    explained = torch._dynamo.explain(model)(ids, labels=ids, segment_ids=seg)
    assert explained.graph_break_count == 0, [str(b.reason) for b in explained.break_reasons]


def test_a_kind_whose_attend_takes_no_segment_ids_runs_plain_batches_and_refuses_padded_ones():
    class OldStyle(Attention):
        def attend(self, x, q, k, v, cache):
            k, v, _ = self.with_cache(cache, k, v)
            return causal_sdpa(q, k, v)

    register_attention(AttentionKind("old_style", OldStyle))
    try:
        model = tiny("old_style")
        ids = torch.randint(0, 13, (2, 6))
        assert model(ids).shape == (2, 6, 13)
        with pytest.raises(ValueError, match=r"OldStyle\.attend\(x, q, k, v, cache\) takes no segment_ids; expected"):
            model(ids, attention_mask=torch.tensor([[1] * 6, [0] + [1] * 5]))
    finally:
        unregister_attention("old_style")


@pytest.mark.parametrize("kind", DRAWING)
def test_positions_drawn_at_evaluation_are_a_function_of_the_sequence_alone(kind):
    """The same sequence in two rows of a batch, in two batches, and alone: the same logits; another sequence of
    the same length: another draw."""
    model = tiny(kind, **DRAWN)
    ids, _ = documents()
    with torch.no_grad():
        alone = model(ids[0][None])[0]
        twice = model(torch.stack([ids[0], ids[0]]))
        torch.testing.assert_close(twice[0], twice[1], **TOL)  # a batch of two may round apart (BLAS blocking)
        torch.testing.assert_close(twice[0], alone, **TOL)
        torch.testing.assert_close(model(ids[0][None])[0], alone, atol=0, rtol=0)
    other = ids[0].roll(1)
    drawn = model.drawn_positions(torch.stack([ids[0], other]), None, None)[0]  # the first layer's
    assert not torch.equal(drawn[0], drawn[1]) and (drawn.diff(dim=-1) > 0).all() and drawn.max() < 64
