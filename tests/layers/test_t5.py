"""The ``t5`` kind against its authors' code: T5's relative position bias as torchscale implements it.

Ported below from microsoft/torchscale, commit 4d1e0e82e5adf86dd424f1463192635b73fc8efc:
``torchscale/component/relative_position_bias.py`` (``RelativePositionBias._relative_position_bucket`` and
``compute_bias``, used with ``bidirectional=False``, as a decoder's causal buckets) and the non-flash branch of
``MultiheadAttention.attention_ops`` in ``torchscale/component/multihead_attention.py`` (q scaled, q k^T, plus the
causal mask and ``rel_pos``, softmax, times v). The buckets are also checked against Hugging Face transformers'
``T5Attention._relative_position_bucket`` (Mesh TensorFlow's function), where transformers is installed.

And ported from Hugging Face transformers, ``src/transformers/models/t5/modeling_t5.py`` (5.24.0; the same code at
commit 6b8b757dfcb582379a64f013cdce46c43629f2b0): ``T5Attention._relative_position_bucket``, ``compute_bias`` and
``eager_attention_forward``, with ``T5Stack``'s sharing: only layer 0 has ``has_relative_attention_bias=True``, and
its ``position_bias`` is passed to every later layer (Mesh TensorFlow's ``relative_attention_type="bias_shared"``,
``mesh_tensorflow/transformer/transformer_layers.py``, tensorflow/mesh commit
da907937e68aa421186f1178d71eb5f736fcb069).
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from tra_attn import ModelConfig, TransformerLM
from tra_attn.layers import T5Attention, T5Options
from tra_attn.ops.t5 import relative_position_bucket, t5_attention

SETTINGS = [(32, 128), (2, 5), (7, 33), (8, 20), (64, 4096)]  # (num_buckets, max_distance)


class PortedRelativePositionBias(nn.Module):
    """torchscale's RelativePositionBias (the port: names and arithmetic as there)."""

    def __init__(self, bidirectional=True, num_buckets=32, max_distance=128, n_heads=12):
        super().__init__()
        self.bidirectional = bidirectional
        self.num_buckets = num_buckets
        self.max_distance = max_distance
        self.n_heads = n_heads
        self.relative_attention_bias = nn.Embedding(self.num_buckets, self.n_heads)

    @staticmethod
    def _relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
        ret = 0
        n = -relative_position
        if bidirectional:
            num_buckets //= 2
            ret += (n < 0).to(torch.long) * num_buckets
            n = torch.abs(n)
        else:
            n = torch.max(n, torch.zeros_like(n))

        max_exact = num_buckets // 2
        is_small = n < max_exact

        val_if_large = max_exact + (
            torch.log(n.float() / max_exact) / math.log(max_distance / max_exact) * (num_buckets - max_exact)
        ).to(torch.long)
        val_if_large = torch.min(val_if_large, torch.full_like(val_if_large, num_buckets - 1))

        ret += torch.where(is_small, n, val_if_large)
        return ret

    def compute_bias(self, qlen, klen, step=None):
        step = 0 if step is None else step
        context_position = torch.arange(step, step + qlen, dtype=torch.long)[:, None]
        memory_position = torch.arange(klen, dtype=torch.long)[None, :]
        relative_position = memory_position - context_position  # shape (qlen, klen)
        rp_bucket = self._relative_position_bucket(
            relative_position,
            bidirectional=self.bidirectional,
            num_buckets=self.num_buckets,
            max_distance=self.max_distance,
        )
        values = self.relative_attention_bias(rp_bucket)  # shape (qlen, klen, num_heads)
        return values.permute([2, 0, 1]).unsqueeze(0)  # shape (1, num_heads, qlen, klen)

    def forward(self, batch_size, qlen, klen, step=None):
        return self.compute_bias(qlen, klen, step).repeat(batch_size, 1, 1, 1).view(-1, qlen, klen)


def ported_attention(q, k, v, rel_pos, attn_mask):
    """torchscale's attention_ops without flash attention, for q (B*H, Sq, D), k, v (B*H, Sk, D); its softmax runs
    in the inputs' dtype (theirs in float32, a guard for half precision that would round fp64 to fp32)."""
    scaling = q.shape[-1] ** -0.5
    q = q * scaling
    attn_weights = torch.bmm(q, k.transpose(1, 2))
    attn_weights = torch.nan_to_num(attn_weights)
    attn_weights += attn_mask.unsqueeze(0)
    rel_pos = rel_pos.view(attn_weights.size())
    attn_weights = attn_weights + rel_pos
    attn_weights = torch.softmax(attn_weights, dim=-1, dtype=attn_weights.dtype).type_as(attn_weights)
    return torch.bmm(attn_weights, v)


@pytest.mark.parametrize("num_buckets,max_distance", SETTINGS)
def test_the_buckets_are_the_authors(num_buckets, max_distance):
    distance = torch.arange(0, 3 * max_distance + 50)
    ours = relative_position_bucket(distance, num_buckets, max_distance)
    theirs = PortedRelativePositionBias._relative_position_bucket(-distance, False, num_buckets, max_distance)
    assert torch.equal(ours, theirs)
    assert ours.max() == num_buckets - 1 and torch.equal(ours[: num_buckets // 2], distance[: num_buckets // 2])
    try:
        from transformers.models.t5.modeling_t5 import T5Attention as HFT5Attention
    except ImportError:
        return
    assert torch.equal(ours, HFT5Attention._relative_position_bucket(-distance, False, num_buckets, max_distance))


@pytest.mark.parametrize("impl,chunk", [("naive", 256), ("chunked", 4)])
@pytest.mark.parametrize("sq,sk", [(23, 23), (1, 19), (6, 13)])
def test_forward_and_backward_equal_the_authors_in_fp64(impl, chunk, sq, sk):
    """Prefill and decoding (queries at the last Sq of Sk positions: torchscale's ``step``) with a table that
    covers exact and log buckets."""
    torch.manual_seed(0)
    b, h, d, num_buckets, max_distance = 2, 3, 8, 8, 12
    ported = PortedRelativePositionBias(False, num_buckets, max_distance, h).double()
    q = torch.randn(b, h, sq, d, dtype=torch.float64, requires_grad=True)
    k, v = (torch.randn(b, h, sk, d, dtype=torch.float64, requires_grad=True) for _ in range(2))
    table = ported.relative_attention_bias.weight
    ours = t5_attention(q, k, v, table, num_buckets, max_distance, impl=impl, chunk=chunk)
    mask = torch.triu(torch.full((sq, sk), float("-inf"), dtype=torch.float64), sk - sq + 1)
    rel_pos = ported(b, sq, sk, step=sk - sq)
    theirs = ported_attention(*(t.reshape(b * h, -1, d) for t in (q, k, v)), rel_pos, mask).view(b, h, sq, d)
    torch.testing.assert_close(ours, theirs, atol=1e-12, rtol=0)
    grad = torch.randn_like(ours)
    inputs = (q, k, v, table)
    for a, e in zip(torch.autograd.grad(ours, inputs, grad), torch.autograd.grad(theirs, inputs, grad)):
        torch.testing.assert_close(a, e, atol=1e-12, rtol=0)


def test_the_layer_reads_its_options_and_refuses_bad_ones():
    layer = T5Attention(d_model=16, n_heads=2, num_buckets=6, max_distance=9)
    assert layer.relative_attention_bias.shape == (6, 2) and (layer.relative_attention_bias == 0).all()
    assert ModelConfig(attention="t5").attention_options == T5Options(num_buckets=32, max_distance=128)
    assert T5Options().shared_table is True
    with pytest.raises(ValueError, match=r"T5Options\.shared_table = 'yes'; expected true or false"):
        T5Options(shared_table="yes")
    with pytest.raises(ValueError, match=r"T5Options\.num_buckets = 1; expected an integer >= 2"):
        T5Options(num_buckets=1)
    with pytest.raises(ValueError, match=r"T5Options\.max_distance = 4; expected more than num_buckets // 2 = 4"):
        T5Options(num_buckets=8, max_distance=4)
    with pytest.raises(ValueError, match=r"T5Options\.random_positions = -1; expected a non-negative integer"):
        ModelConfig(attention="t5", attention_options={"random_positions": -1})


def hf_relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
    """transformers' ``T5Attention._relative_position_bucket`` (verbatim, its docstring left out)."""
    relative_buckets = 0
    if bidirectional:
        num_buckets //= 2
        relative_buckets += (relative_position > 0).to(torch.long) * num_buckets
        relative_position = torch.abs(relative_position)
    else:
        relative_position = -torch.min(relative_position, torch.zeros_like(relative_position))
    # now relative_position is in the range [0, inf)

    # half of the buckets are for exact increments in positions
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact

    # The other half of the buckets are for logarithmically bigger bins in positions up to max_distance
    relative_position_if_large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    relative_position_if_large = torch.min(
        relative_position_if_large, torch.full_like(relative_position_if_large, num_buckets - 1)
    )

    relative_buckets += torch.where(is_small, relative_position, relative_position_if_large)
    return relative_buckets


def hf_compute_bias(relative_attention_bias, query_length, key_length, num_buckets, max_distance, past_seen_tokens=0):
    """transformers' ``T5Attention.compute_bias`` of a decoder (``is_decoder``: unidirectional), its module attributes
    as arguments."""
    device = relative_attention_bias.weight.device
    context_position = torch.arange(query_length, dtype=torch.long, device=device)[:, None] + past_seen_tokens
    memory_position = torch.arange(key_length, dtype=torch.long, device=device)[None, :]
    relative_position = memory_position - context_position  # shape (query_length, key_length)
    relative_position_bucket = hf_relative_position_bucket(
        relative_position,  # shape (query_length, key_length)
        bidirectional=False,
        num_buckets=num_buckets,
        max_distance=max_distance,
    )
    values = relative_attention_bias(relative_position_bucket)  # shape (query_length, key_length, num_heads)
    values = values.permute([2, 0, 1]).unsqueeze(0)  # shape (1, num_heads, query_length, key_length)
    return values


def hf_eager_attention_forward(query, key, value, attention_mask, position_bias):
    """transformers' ``eager_attention_forward`` without dropout, with the library's scale 1/sqrt(D) where T5 passes
    ``scaling=1.0``, returning (B, H, Sq, D) (before its final transpose)."""
    scaling = query.size(-1) ** -0.5
    attn_weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    attn_weights = attn_weights + position_bias
    attn_weights = attn_weights + attention_mask
    attn_weights = nn.functional.softmax(attn_weights, dim=-1)
    return torch.matmul(attn_weights, value)


@pytest.mark.parametrize("sq,sk", [(13, 13), (1, 13), (5, 13)])
def test_a_model_shares_one_table_as_hugging_faces_t5_stack_in_fp64(sq, sk):
    """T5Stack: layer 0 computes ``position_bias`` from its table, layer 1 reuses it. Ours: the two layers of a model,
    one table; layer 1's queries read layer 0's output. Outputs and gradients (the table's: the sum of both layers')
    equal transformers' (queries at the last Sq of Sk positions: ``past_seen_tokens``)."""
    torch.manual_seed(0)
    b, h, d, num_buckets, max_distance = 2, 3, 8, 8, 12
    options = {"num_buckets": num_buckets, "max_distance": max_distance}
    model = TransformerLM(ModelConfig(d_model=h * d, n_heads=h, n_layers=2, attention="t5", attention_options=options))
    first, second = (block.attn for block in model.double().blocks)
    assert first.relative_attention_bias is second.relative_attention_bias
    embedding = nn.Embedding(num_buckets, h).double()
    first.relative_attention_bias.data.copy_(embedding.weight)
    inputs = [torch.randn(b, h, n, d, dtype=torch.float64, requires_grad=True) for n in (sq, sk, sk) * 2]
    q0, k0, v0, q1, k1, v1 = inputs
    mask = torch.triu(torch.full((sq, sk), float("-inf"), dtype=torch.float64), sk - sq + 1)
    position_bias = hf_compute_bias(embedding, sq, sk, num_buckets, max_distance, past_seen_tokens=sk - sq)
    layer0 = hf_eager_attention_forward(q0, k0, v0, mask, position_bias)
    theirs = hf_eager_attention_forward(q1 + layer0, k1, v1, mask, position_bias)  # layer 1: layer 0's bias
    ours = second.attend(None, q1 + first.attend(None, q0, k0, v0, None), k1, v1, None)
    torch.testing.assert_close(ours, theirs, atol=1e-12, rtol=0)
    grad = torch.randn_like(ours)
    ours_grads = torch.autograd.grad(ours, [*inputs, first.relative_attention_bias], grad)
    theirs_grads = torch.autograd.grad(theirs, [*inputs, embedding.weight], grad)
    for a, e in zip(ours_grads, theirs_grads):
        torch.testing.assert_close(a, e, atol=1e-12, rtol=0)
    distance = torch.arange(0, 3 * max_distance)
    buckets = hf_relative_position_bucket(-distance, False, num_buckets, max_distance)
    assert torch.equal(relative_position_bucket(distance, num_buckets, max_distance), buckets)


def test_one_table_for_both_layers_whose_gradient_is_the_sum_of_theirs():
    """shared_table=True: one table (one tensor in every layer, counted, optimized and saved once); its gradient is
    the sum of the gradients that the layers' own tables get in the former kind (shared_table=False, same values)."""

    def model(**options):
        torch.manual_seed(0)
        config = ModelConfig(
            vocab_size=11, d_model=16, n_heads=4, n_layers=2, attention="t5", attention_options=options
        )
        return TransformerLM(config).double()

    shared, own = model(), model(shared_table=False)
    tables = [block.attn.relative_attention_bias for block in shared.blocks]
    assert tables[0] is tables[1]
    assert [n for n in shared.state_dict() if "relative" in n] == ["blocks.0.attn.relative_attention_bias"]
    assert shared.num_parameters() == own.num_parameters() - 32 * 4
    with torch.no_grad():
        tables[0].normal_()
    own.load_state_dict(shared.state_dict(), strict=False)
    own.blocks[1].attn.relative_attention_bias.data.copy_(tables[0])
    ids = torch.randint(0, 11, (2, 12))
    assert torch.equal(shared(ids), own(ids))
    shared(ids, labels=ids).sum().backward()
    own(ids, labels=ids).sum().backward()
    both = sum(block.attn.relative_attention_bias.grad for block in own.blocks)
    torch.testing.assert_close(tables[1].grad, both, atol=1e-12, rtol=0)
    optimizer = torch.optim.AdamW(shared.parameters())
    assert sum(p is tables[0] for group in optimizer.param_groups for p in group["params"]) == 1
