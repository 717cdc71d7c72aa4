"""The block parts every kind may have (layers/block_parts.py): FoX Pro's token shift of keys and values, its
per-head output norm and the output gate, by hand on a small layer, and refused where a kind has its own."""

from __future__ import annotations

import pytest
import torch

from tra_attn import ModelConfig, TransformerLM
from tra_attn.layers import NoPEAttention
from tra_attn.layers.cache import LayerCache
from tra_attn.ops.causal import causal_sdpa
from tra_attn.ops.rms import rms_normalize


def layer(**parts) -> NoPEAttention:
    torch.manual_seed(0)
    return NoPEAttention(8, 2, **parts).double()


def by_hand(attn: NoPEAttention, x: torch.Tensor, starts=(0,)) -> torch.Tensor:
    """The layer's output computed from its weights: shift (a document starting at each of ``starts``), softmax
    attention, norm, gate."""
    q, k, v = (attn.split_heads(p(x)) for p in (attn.q_proj, attn.k_proj, attn.v_proj))
    if attn.block_shift is not None:
        shifted = []
        for z, proj in ((k, attn.block_shift.k_mix), (v, attn.block_shift.v_mix)):
            a = torch.sigmoid(proj(x)).transpose(1, 2)[..., None]
            before = torch.cat([torch.zeros_like(z[..., :1, :]), z[..., :-1, :]], dim=-2)
            before[..., list(starts), :] = 0.0  # nothing comes from before a document's first token
            shifted.append((1 - a) * z + a * before)
        k, v = shifted
    out = causal_sdpa(q, k, v)
    parts = attn.block_output
    if parts is not None and parts.norm is not None:
        out = rms_normalize(out, attn.norm_eps) * parts.norm.weight[:, None]
    if parts is not None and parts.gate is not None:
        out = out * torch.sigmoid(attn.split_heads(parts.gate(x)))
    b, _, s, _ = out.shape
    return attn.o_proj(out.transpose(1, 2).reshape(b, s, -1))


@pytest.mark.parametrize(
    "parts",
    [
        {"kv_shift": True},
        {"output_gate": True},
        {"output_norm": True},
        dict.fromkeys(("kv_shift", "output_gate", "output_norm"), True),
    ],  # fmt: skip
)
def test_each_part_computes_its_formula(parts):
    attn = layer(**parts)
    with torch.no_grad():  # weights away from their initial values, so that each part does something
        for p in attn.parameters():
            p.add_(torch.randn_like(p))
    x = torch.randn(2, 7, 8, dtype=torch.float64)
    torch.testing.assert_close(attn(x), by_hand(attn, x), atol=1e-12, rtol=1e-12)
    assert not torch.allclose(attn(x), by_hand(layer(), x))


def test_the_shift_starts_again_at_each_document_and_continues_through_the_cache():
    attn = layer(kv_shift=True, output_gate=True, output_norm=True)
    x = torch.randn(1, 9, 8, dtype=torch.float64)
    segments = torch.tensor([[0, 0, 0, 0, 1, 1, 1, 1, 1]], dtype=torch.int32)
    packed = attn(x, segment_ids=segments)
    torch.testing.assert_close(packed[:, :4], attn(x[:, :4]), atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(packed[:, 4:], attn(x[:, 4:]), atol=1e-12, rtol=1e-12)
    cache = LayerCache()
    chunks = [attn(x[:, a:b], cache) for a, b in ((0, 3), (3, 4), (4, 9))]
    torch.testing.assert_close(torch.cat(chunks, dim=1), attn(x), atol=1e-12, rtol=1e-12)
    assert cache.state["shift_k"].shape == (1, 2, 1, 4)  # the last unshifted key, for the next forward
    cache.select_batch(torch.tensor([0, 0]))
    assert cache.state["shift_v"].shape == (2, 2, 1, 4)


@pytest.mark.parametrize("kind, part", [("fox_pro", "output_gate"), ("fox_pro", "kv_shift"),
                                        ("fox_pro", "output_norm"), ("gated", "output_gate")])  # fmt: skip
def test_a_kind_refuses_a_part_it_has_of_its_own(kind, part):
    with pytest.raises(
        ValueError, match=rf"ModelConfig\.{part} = True: \w+Attention has its own {part.replace('_', ' ')}"
    ):
        ModelConfig(attention=kind, **{part: True})
    ModelConfig(attention="gated", kv_shift=True)  # gated attention does not shift


def test_the_parts_add_their_parameters():
    def count(**parts) -> int:
        return sum(p.numel() for p in TransformerLM(ModelConfig(d_model=32, n_heads=4, attention="nope", **parts))
                   .parameters())  # fmt: skip

    plain = count()
    assert count(output_gate=True) - plain == 2 * 32 * 32  # W_g per layer
    assert count(output_norm=True) - plain == 2 * 32  # a weight per head and channel
    assert count(kv_shift=True) - plain == 2 * 2 * 32 * 4  # the two mixes, a scalar per head from x


def test_a_question_gives_every_method_the_parts_its_kind_lacks():
    from tra_attn.experiments.methods import Method, with_block_parts

    methods = with_block_parts((Method("tra"), Method("gated"), Method("fox_pro")))
    assert [m.label for m in methods] == ["TRA", "TRA, with FoX Pro's block", "gated attention",
                                          "gated attention, with FoX Pro's block", "FoX Pro"]  # fmt: skip
    assert methods[1].model == {"output_gate": True, "output_norm": True, "kv_shift": True}
    assert methods[3].model == {"kv_shift": True}  # its own gate stays; FoX Pro has the whole block
