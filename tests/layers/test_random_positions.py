"""Randomized positional encodings (Ruoss et al., ACL 2023) as the ``random_positions`` option of the position-based
kinds: training forwards draw per row a sorted random subset of [0, N), one draw for every layer (t5, fire, kerple;
rope with ``random_per_layer`` false; alibi with ``random_distances`` false) or, as the authors' code does, a draw
per layer (rope) and, for ALiBi, random distances (a sorted random subset of [1, N) replaces 1, ..., S - 1), checked
against the authors' functions ported below; evaluation and generation use plain positions, or with
``random_positions_at_eval`` draw them too (a draw per sequence and layer, a function of its tokens); resuming a run
repeats the draws; no graph break."""

from __future__ import annotations

import dataclasses
import math
import shutil

import numpy as np
import pytest
import torch

from tests.training.test_train import assert_same_weights, losses, tiny
from tra_attn import ModelConfig, TransformerLM
from tra_attn.layers.alibi import ALiBiOptions
from tra_attn.layers.rope import RoPEOptions
from tra_attn.ops.alibi import alibi_attention, alibi_bias, alibi_slopes, document_alibi_bias
from tra_attn.ops.masks import causal_mask
from tra_attn.ops.positions import drawn_distances, random_distances, random_positions, sequence_positions
from tra_attn.ops.rope import apply_rope, rope_angles
from tra_attn.training import train

KINDS = ["rope", "alibi", "t5", "fire", "kerple"]
SPAN = 50
# The options that give rope and alibi the former draw: one sorted subset of [0, N) shared by every layer.
FORMER = {"rope": {"random_per_layer": False}, "alibi": {"random_distances": False}}


def authors_rel_shift_inner(logits: np.ndarray, attention_length: int) -> np.ndarray:
    """Ported from google-deepmind/randomized_positional_encodings, models/positional_encodings.py at commit
    e8c64749d8cad7772dc7ade75b32ef9b2b29b466, ``_rel_shift_inner``: verbatim except numpy for jax (``jax.lax.slice``
    as numpy slices)."""
    if logits.ndim != 2:
        raise ValueError("`logits` needs to be an array of dimension 2.")
    tq, total_len = logits.shape
    assert total_len == tq + attention_length
    logits = np.reshape(logits, [total_len, tq])
    logits = logits[1:]
    logits = np.reshape(logits, [tq, total_len - 1])
    return logits[:, :attention_length]


def authors_noisy_alibi_biases(attention_shape, noise_max_length: int, sample: np.ndarray) -> np.ndarray:
    """Ported from the same file and commit, ``compute_noisy_alibi_encodings_biases`` with their default
    ``randomize_both_sides=False``: verbatim except numpy for jax, ``sample`` (max(Sq, Sk) - 1 distinct
    integers of [1, noise_max_length)) for their ``jrandom.choice(hk.next_rng_key(), jnp.arange(1,
    noise_max_length), replace=False)``, their ``relative_shift`` (a vmap of ``_rel_shift_inner`` over the two
    leading axes) as one call on the (Sq, 2 Sk) matrix, and the slopes from ours (equal to their
    ``_get_alibi_slopes``)."""
    num_heads, q_seq_len, k_seq_len = attention_shape
    assert sample.shape == (max(q_seq_len, k_seq_len) - 1,) and len(set(sample.tolist())) == sample.size
    assert sample.min(initial=1) >= 1 and sample.max(initial=1) < noise_max_length
    symmetric_positions = -np.sort(sample).astype(np.float64)
    right_positions = symmetric_positions[: k_seq_len - 1]
    left_positions = np.flip(symmetric_positions)[: q_seq_len - 1]
    left_positions += 0.5
    left_positions = np.concatenate((np.zeros((1,)), left_positions))  # their jnp.empty: a dummy, never read
    positions = np.concatenate((left_positions, np.zeros((1,)), right_positions))
    positions = np.tile(positions, (q_seq_len, 1))
    alibi = authors_rel_shift_inner(positions, attention_length=k_seq_len)
    return alibi * alibi_slopes(num_heads).double().numpy()[:, None, None]


def authors_noisy_rotary(x: np.ndarray, noise_max_length: int, indexes: np.ndarray, max_time: float) -> np.ndarray:
    """Ported from the same file and commit, ``apply_rotary_encoding`` with ``noisy=True`` as models/transformer.py
    calls it (``position=jnp.arange(noise_max_length)[None, :]``) on x (B, T, H, D), and
    ``_rope_kernel``: verbatim except numpy for jax, fp64, and ``indexes`` (the sorted draw) for the draw of their
    ``noisy_fixed_positional_encodings`` (``jnp.sort(jrandom.choice(rng, jnp.arange(noise_max_length), (T,),
    replace=False))``). Their channel pairs are adjacent (2c, 2c + 1); ours are (c, c + D/2)."""
    position = np.arange(noise_max_length)[None, :]
    freq_seq = np.arange(x.shape[-1] // 2, dtype=np.float64)
    freq_seq = freq_seq / (x.shape[-1] // 2)
    inv_freq = max_time**-freq_seq
    inv_freq = np.repeat(inv_freq, 2, 0)
    t = position[:, :, None, None] * inv_freq[None, None, None, :]
    t = t[0, :, 0][indexes]  # noisy_fixed_positional_encodings(t[0, :, 0], x.shape[1], rng=rng)
    t = t[None, :, None, :]
    n = x.shape[-1]
    kernel = np.zeros((n, n))
    for i in range(n):
        if i % 2 == 0:
            kernel[i, i + 1] = 1
        else:
            kernel[i, i - 1] = -1
    x_rot = np.einsum("bthd,dD->bthD", x, kernel)
    return x * np.cos(t) + np.sin(t) * x_rot


def authors_noisy_draws(kind: str, num_layers: int, length: int, noise_max_length: int, generator) -> list:
    """The draws of the authors' ``TransformerEncoder`` (models/transformer.py of the same repository and commit),
    one per layer: each layer builds a new ``MultiHeadDotProductAttention``, whose noisy RoPE draws with its own
    ``hk.next_rng_key()`` (one key for q and k) the sorted positions of ``noisy_fixed_positional_encodings``, and
    whose noisy ALiBi draws the distances of ``compute_noisy_alibi_encodings_biases`` (sorted there). Their steps,
    with ``jrandom.choice(key, a, shape=(n,), replace=False)`` as ``a[torch.randperm(len(a), generator)[:n]]``
    (the keys as one generator's stream) and without the encodings themselves."""
    draws = []
    for _ in range(num_layers):
        if kind == "rope":  # jnp.sort(jrandom.choice(rng, jnp.arange(noise_max_length), shape=(T,), replace=False))
            indexes = torch.arange(noise_max_length)[torch.randperm(noise_max_length, generator=generator)[:length]]
            draws.append(indexes.sort().values)
        else:  # jrandom.choice(key, a=jnp.arange(1, noise_max_length), shape=(max(T_q, T_k) - 1,), replace=False)
            a = torch.arange(1, noise_max_length)
            draws.append(a[torch.randperm(len(a), generator=generator)[: length - 1]].sort().values)
    return draws


def pair(kind: str, at_eval: bool = False, former: bool = False, **fields) -> tuple[TransformerLM, TransformerLM]:
    """The same weights with random positions in [0, SPAN) (also at evaluation if ``at_eval``; with the former
    draw, one for every layer, if ``former``) and without."""
    config = ModelConfig(vocab_size=13, d_model=16, n_layers=3, n_heads=2, attention=kind, **fields)
    torch.manual_seed(0)
    plain = TransformerLM(config)
    with torch.no_grad():  # T5's table starts at zero (no positions at all): give it values
        for p in plain.parameters():
            p.add_(0.1 * torch.randn_like(p))
    changes = dict(random_positions=SPAN, random_positions_at_eval=at_eval, **(FORMER.get(kind, {}) if former else {}))
    options = dataclasses.replace(config.attention_options, **changes)
    randomized = TransformerLM(dataclasses.replace(config, attention_options=options))
    randomized.load_state_dict(plain.state_dict())
    return randomized, plain


def record_positions(model: TransformerLM) -> list:
    """Make every layer record the ``positions`` its attend receives."""
    seen = []
    for block in model.blocks:
        attend = block.attn.attend

        def recording(*args, attend=attend, **kwargs):
            seen.append(kwargs.get("positions"))
            return attend(*args, **kwargs)

        block.attn.attend = recording
    return seen


def test_the_draw_is_sorted_distinct_in_range_and_per_document():
    torch.manual_seed(0)
    drawn = random_positions(64, 10, 12)
    assert drawn.shape == (64, 10) and drawn.dtype == torch.int64
    assert (drawn.diff(dim=-1) > 0).all() and drawn.min() >= 0 and drawn.max() < 12
    assert len({tuple(row) for row in drawn.tolist()}) > 1 and (drawn[:, -1] == 11).any()  # rows differ
    segments = torch.tensor([[-1, -1, 0, 0, 0, 1, 1], [0, 0, 0, 0, 0, -1, -1]])
    torch.manual_seed(1)
    rows = random_positions(2, 7, 30)
    torch.manual_seed(1)
    documents = random_positions(2, 7, 30, segment_ids=segments)
    assert documents[0, 2:].tolist() == rows[0, :3].tolist() + rows[0, :2].tolist()  # each document: the row's first
    assert documents[1, :5].tolist() == rows[1, :5].tolist()
    with pytest.raises(ValueError, match=r"random_positions = 8; expected at least the sequence length 10"):
        random_positions(1, 10, 8)


@pytest.mark.parametrize("kind", KINDS)
def test_evaluation_ignores_the_option_and_training_draws_one_set_of_positions_for_every_layer(kind):
    """t5, fire, kerple; rope and alibi with their former values (``FORMER``)."""
    randomized, plain = pair(kind, former=True)
    ids = torch.randint(0, 13, (4, 17))
    randomized.eval(), plain.eval()
    with torch.no_grad():
        assert torch.equal(randomized(ids), plain(ids))
        assert torch.equal(
            randomized.generate(ids[:, :5], 6, temperature=0), plain.generate(ids[:, :5], 6, temperature=0)
        )
    randomized.train(), plain.train()
    seen = record_positions(randomized)
    torch.manual_seed(3)
    loss = randomized(ids, labels=ids).mean()
    assert len(seen) == 3 and all(p is seen[0] for p in seen)  # one draw, every layer
    positions = seen[0]
    assert positions.shape == (4, 17) and (positions.diff(dim=-1) > 0).all()
    assert positions.min() >= 0 and positions.max() < SPAN and not torch.equal(positions[0], torch.arange(17))
    assert not torch.allclose(loss, plain(ids, labels=ids).mean())
    torch.manual_seed(3)
    assert torch.equal(randomized(ids, labels=ids).mean(), loss)  # the global generator decides the draw


def test_a_padded_training_batch_gives_each_document_its_rows_first_positions():
    randomized, _ = pair("t5")
    seen = record_positions(randomized)
    ids = torch.randint(0, 13, (2, 9))
    mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1, 1], [1] * 9])
    torch.manual_seed(4)
    randomized(ids, attention_mask=mask, labels=ids)
    torch.manual_seed(4)
    rows = random_positions(2, 9, SPAN)  # the model's draw: the forward draws nothing else before it
    assert torch.equal(seen[0][0, 3:], rows[0, :6]) and torch.equal(seen[0][1], rows[1])
    assert (seen[0][0, :3] == rows[0, 0]).all()  # padding (never read) takes the first


@pytest.mark.parametrize("kind", KINDS)
def test_a_training_forward_with_random_positions_has_no_graph_breaks(kind):
    randomized, _ = pair(kind)
    ids = torch.randint(0, 13, (2, 17))
    torch._dynamo.reset()
    explained = torch._dynamo.explain(randomized)(ids, labels=ids)
    assert explained.graph_break_count == 0, [str(b.reason) for b in explained.break_reasons]


def test_a_run_with_random_positions_resumes_bit_identically(tmp_path):
    model = ModelConfig(vocab_size=6, d_model=16, n_layers=2, n_heads=2, attention="alibi")
    config = tiny(model=dataclasses.replace(model, attention_options={"random_positions": 64}))
    straight, resumed, plain = tmp_path / "straight", tmp_path / "resumed", tmp_path / "plain"
    train(config, straight, progress=False)
    train(config, resumed, progress=False)
    shutil.rmtree(resumed / "checkpoints" / "step_0000008")  # back to the step-4 checkpoint
    train(config, resumed, resume=True, progress=False)
    assert_same_weights(straight, resumed)
    assert losses(straight) == losses(resumed)
    train(tiny(model=model), plain, progress=False)
    assert losses(plain) != losses(straight)


def test_every_position_based_kind_randomizes_its_positions_as_a_method():
    from tra_attn.experiments.engine import run_config
    from tra_attn.experiments.flipflop import FLIPFLOP
    from tra_attn.experiments.methods import randomized
    from tra_attn.experiments.spec import Question

    for kind in KINDS:
        method = randomized(kind, 2048)
        assert method.kind == kind and method.options == {"random_positions": 2048}
        assert method.label.endswith(", randomized positions")
    question = Question("x?", "flipflop", (randomized("fire", 2048),), (0,), lrs=(1e-3,), lrs_source="a test")
    config = run_config(FLIPFLOP, question, randomized("fire", 2048), 1e-3, 0)
    assert config.model.attention_options.random_positions == 2048


@pytest.mark.parametrize("kind", KINDS)
def test_with_the_at_eval_option_evaluation_draws_positions_per_sequence_and_training_is_unchanged(kind):
    """t5, fire, kerple; rope and alibi with their former values (``FORMER``)."""
    at_eval, plain = pair(kind, at_eval=True, former=True)
    training, _ = pair(kind, former=True)
    ids = torch.randint(0, 13, (4, 17))
    at_eval.eval(), plain.eval()
    seen = record_positions(at_eval)
    state = torch.get_rng_state()
    with torch.no_grad():
        first, second = at_eval(ids), at_eval(ids)
    assert torch.equal(torch.get_rng_state(), state)  # evaluation leaves the global generator alone
    assert torch.equal(first, second) and not torch.allclose(first, plain(ids))
    assert len(seen) == 6 and all(p is seen[0] for p in seen[:3])  # one draw per forward, every layer
    positions = seen[0]
    assert positions.shape == (4, 17) and (positions.diff(dim=-1) > 0).all() and positions.max() < SPAN
    assert torch.equal(positions[1], sequence_positions(ids[1:2], SPAN)[0])  # each row's own draw, by its tokens
    with torch.no_grad():
        generated = at_eval.generate(ids[:, :5], 3, temperature=0, use_cache=False)
        assert generated.shape == (4, 8)
        assert torch.equal(at_eval.generate(ids[:, :5], 3, temperature=0), generated)  # no cache to continue
    with pytest.raises(ValueError, match=r"random_positions_at_eval: a forward with a KV cache; expected none"):
        at_eval(ids, cache=at_eval.new_cache())
    at_eval.train(), training.train()
    torch.manual_seed(5)
    loss = at_eval(ids, labels=ids).mean()
    torch.manual_seed(5)
    assert torch.equal(loss, training(ids, labels=ids).mean())


def test_positions_at_eval_need_a_range_to_draw_from():
    from tra_attn.layers.alibi import ALiBiOptions

    with pytest.raises(ValueError, match=r"ALiBiOptions.random_positions_at_eval = True with random_positions = 0"):
        ALiBiOptions(random_positions_at_eval=True)
    with pytest.raises(ValueError, match=r"random_positions_at_eval = True with random_positions = 0"):
        ModelConfig(vocab_size=5, attention="t5", attention_options={"random_positions_at_eval": True})


def test_every_position_based_kind_can_draw_its_positions_at_evaluation_too():
    from tra_attn.experiments.methods import randomized

    for kind in KINDS:
        method = randomized(kind, 1024, at_eval=True)
        assert method.kind == kind and method.label.endswith(", drawn at evaluation too")
        assert method.options == {"random_positions": 1024, "random_positions_at_eval": True}


def test_the_options_default_to_the_authors_draws_and_refuse_a_non_boolean():
    assert ALiBiOptions().random_distances is True and RoPEOptions().random_per_layer is True
    with pytest.raises(ValueError, match=r"ALiBiOptions\.random_distances = 1; expected true or false"):
        ALiBiOptions(random_distances=1)
    with pytest.raises(ValueError, match=r"RoPEOptions\.random_per_layer = 'no'; expected true or false"):
        RoPEOptions(random_per_layer="no")


@pytest.mark.parametrize("kind", ["rope", "alibi"])
def test_a_draw_is_distributed_as_the_authors_draw(kind):
    """Each sorted subset comes as often in our draw as in the authors' (uniformly: 1 in C(6, 3) positions of
    [0, 6), 1 in C(5, 2) distances of [1, 6)); a distance table starts with d_0 = 0."""
    n, length, span = 10_000, 3, 6
    generator = torch.Generator().manual_seed(0)
    if kind == "rope":
        ours = random_positions(n, length, span, generator=generator)
    else:
        table = random_distances(n, length, span, generator=generator)
        assert (table[:, 0] == 0).all()
        ours = table[:, 1:]
    theirs = torch.stack(authors_noisy_draws(kind, n, length, span, torch.Generator().manual_seed(1)))
    subsets = math.comb(span, length) if kind == "rope" else math.comb(span - 1, length - 1)
    counts = [
        {tuple(subset): count for subset, count in zip(*(t.tolist() for t in d.unique(dim=0, return_counts=True)))}
        for d in (ours, theirs)
    ]
    assert set(counts[0]) == set(counts[1]) and len(counts[0]) == subsets
    for subset, count in counts[0].items():
        assert abs(count / n - 1 / subsets) < 0.015 and abs(counts[1][subset] / n - 1 / subsets) < 0.015


def test_our_alibi_bias_with_random_distances_is_a_function_of_i_minus_j_and_the_authors_for_the_same_sample():
    """-m_h d_{i-j} on the visible keys, the authors' bias for the same sample, less the 0.5 m_h they add below the
    diagonal (their bidirectional encoder's way to tell left from right, in their plain ALiBi too; ours adds it with
    self_offset 0.5, the next test); the attention equals a softmax over the authors' causal logits."""
    h, s = 4, 9
    table = random_distances(1, s, SPAN, generator=torch.Generator().manual_seed(2))
    assert not torch.equal(table[0], torch.arange(s))
    slopes = alibi_slopes(h).double()
    causal = causal_mask(s, s)
    ours = document_alibi_bias(slopes, None, causal[None, None], distances=table)[0]
    theirs = torch.from_numpy(authors_noisy_alibi_biases((h, s, s), SPAN, table[0, 1:].numpy()))
    theirs = theirs - 0.5 * slopes[:, None, None] * torch.ones(s, s, dtype=torch.float64).tril(-1)
    torch.testing.assert_close(ours[:, causal], theirs[:, causal], atol=1e-12, rtol=0)
    assert torch.isinf(ours[:, ~causal]).all()
    i, j = causal.nonzero().unbind(-1)
    assert torch.equal(ours[:, i, j], -slopes[:, None] * table[0, i - j].double())  # a function of i - j
    generator = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(2, h, s, 8, dtype=torch.float64, generator=generator) for _ in range(3))
    logits = (q @ k.transpose(-1, -2)) / math.sqrt(8) + theirs.masked_fill(~causal, float("-inf"))
    expected = logits.softmax(-1) @ v
    torch.testing.assert_close(alibi_attention(q, k, v, slopes, distances=table.expand(2, s)), expected)


def test_self_offset_one_half_is_the_authors_bias_whole_on_every_path():
    """With self_offset 0.5 our bias is the authors' own, their +0.5 m_h on earlier keys included: drawn distances,
    the plain bias, a packed row (each document as alone) and KV-cache decoding through the model."""
    h, s = 4, 9
    table = random_distances(1, s, SPAN, generator=torch.Generator().manual_seed(2))
    slopes = alibi_slopes(h).double()
    causal = causal_mask(s, s)
    ours = document_alibi_bias(slopes, None, causal[None, None], distances=table, self_offset=0.5)[0]
    theirs = torch.from_numpy(authors_noisy_alibi_biases((h, s, s), SPAN, table[0, 1:].numpy()))
    torch.testing.assert_close(ours[:, causal], theirs[:, causal], atol=1e-12, rtol=0)
    plain = alibi_bias(slopes, s, s, self_offset=0.5)
    offsets = 0.5 * slopes[:, None, None] * torch.ones(s, s, dtype=torch.float64).tril(-1)
    torch.testing.assert_close(plain, alibi_bias(slopes, s, s) + offsets)
    generator = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, h, s, 8, dtype=torch.float64, generator=generator) for _ in range(3))
    seg = torch.tensor([[0] * 4 + [1] * 5])
    packed = alibi_attention(q, k, v, slopes, segment_ids=seg, self_offset=0.5)
    for start, end in ((0, 4), (4, 9)):
        alone = alibi_attention(
            q[..., start:end, :], k[..., start:end, :], v[..., start:end, :], slopes, self_offset=0.5
        )
        torch.testing.assert_close(packed[..., start:end, :], alone)
    model = TransformerLM(ModelConfig(vocab_size=13, d_model=16, n_layers=2, n_heads=2, attention="alibi",
                                      attention_options={"self_offset": 0.5})).double().eval()  # fmt: skip
    ids = torch.randint(0, 13, (2, 9))
    cache = model.new_cache()
    steps = torch.cat(
        [model(ids[:, :5], cache=cache)] + [model(ids[:, i : i + 1], cache=cache) for i in range(5, 9)], 1
    )
    torch.testing.assert_close(steps, model(ids), atol=1e-10, rtol=0)


def test_a_document_reads_its_rows_distances_wherever_it_sits_in_the_row():
    """d_{p_i - p_j} of the row's table for every pair in a document: left or right padding, a second document,
    padding between two of a document's tokens (the row's real tokens are counted, not its slots)."""
    segments = torch.tensor([[-1, -1, 0, 0, 0, 1, 1, 1], [0, 0, -1, 0, 0, 0, -1, -1]])
    rows = random_distances(2, 8, SPAN, generator=torch.Generator().manual_seed(4))
    tables = random_distances(2, 8, SPAN, segment_ids=segments, generator=torch.Generator().manual_seed(4))
    drawn = drawn_distances(tables, segments, 8)
    assert torch.equal(tables[0, 5:], rows[0, :3]) and torch.equal(tables[1, 3:6], rows[1, 2:5])
    positions = torch.tensor([[0, 0, 0, 1, 2, 0, 1, 2], [0, 1, 0, 2, 3, 4, 0, 0]])
    for b in range(2):
        for i in range(8):
            for j in range(i + 1):
                if segments[b, i] >= 0 and segments[b, i] == segments[b, j]:
                    assert drawn[b, i, j] == rows[b, positions[b, i] - positions[b, j]]
    last = drawn_distances(rows, None, 3)  # the last 3 of 8 keys are the queries (as after a cache)
    for r in range(3):
        assert torch.equal(last[:, r, : 6 + r], rows[:, 5 + r - torch.arange(6 + r)])


def test_our_rope_rotates_by_drawn_positions_as_the_authors_noisy_rotary():
    """Given the same sorted draw, our rotation of q (or k) is the authors' noisy rotary, channels mapped from
    their adjacent pairs (2c, 2c + 1) to ours (c, c + D/2)."""
    b, h, s, d = 2, 3, 7, 8
    indexes = random_positions(1, s, SPAN, generator=torch.Generator().manual_seed(6))[0]
    x = torch.randn(b, h, s, d, dtype=torch.float64, generator=torch.Generator().manual_seed(7))
    adjacent = torch.stack([x[..., : d // 2], x[..., d // 2 :]], dim=-1).reshape(b, h, s, d).transpose(1, 2)
    theirs = torch.from_numpy(authors_noisy_rotary(adjacent.numpy(), SPAN, indexes.numpy(), 10000.0)).transpose(1, 2)
    cos, sin = rope_angles(indexes[None, None], d, 10000.0)
    torch.testing.assert_close(apply_rope(x, cos, sin), torch.cat([theirs[..., 0::2], theirs[..., 1::2]], -1))


@pytest.mark.parametrize("kind", ["rope", "alibi"])
def test_each_layer_draws_its_own_as_the_authors_in_training_and_at_evaluation(kind):
    """As many draws as the authors' encoder makes (one per layer), from the global generator layer by layer in
    training (layer 0's draw is the former shared one for RoPE); at evaluation each layer's draw is seeded by the
    sequence and the layer (layer 0's seed: the sequence's alone), a function of the sequence; ALiBi's draws are
    distance tables (d_0 = 0, then a sorted subset of [1, N))."""
    draw = random_positions if kind == "rope" else random_distances
    randomized, plain = pair(kind)
    former, _ = pair(kind, former=True)
    ids = torch.randint(0, 13, (4, 17))
    seen, seen_former = record_positions(randomized), record_positions(former)
    torch.manual_seed(3)
    loss = randomized(ids, labels=ids).mean()
    torch.manual_seed(3)
    expected = [draw(4, 17, SPAN) for _ in range(3)]
    assert len(seen) == len(authors_noisy_draws(kind, 3, 17, SPAN, torch.Generator().manual_seed(0))) == 3
    assert all(torch.equal(p, e) for p, e in zip(seen, expected, strict=True))
    assert all(not torch.equal(seen[a], seen[b]) for a, b in ((0, 1), (0, 2), (1, 2)))
    for p in seen:
        assert p.shape == (4, 17) and (p.diff(dim=-1) > 0).all() and p.max() < SPAN
        assert (p[:, 0] == 0).all() if kind == "alibi" else p.min() >= 0
    torch.manual_seed(3)
    assert torch.equal(randomized(ids, labels=ids).mean(), loss)  # the global generator decides the draws
    torch.manual_seed(3)
    former_loss = former(ids, labels=ids).mean()
    assert all(p is seen_former[0] for p in seen_former) and not torch.allclose(former_loss, loss)
    if kind == "rope":
        assert torch.equal(seen_former[0], seen[0])

    at_eval, _ = pair(kind, at_eval=True)
    at_eval.eval()
    seen = record_positions(at_eval)
    state = torch.get_rng_state()
    with torch.no_grad():
        first, second = at_eval(ids), at_eval(ids)
    assert torch.equal(torch.get_rng_state(), state) and torch.equal(first, second)
    assert len(seen) == 6 and all(torch.equal(a, b) for a, b in zip(seen[:3], seen[3:], strict=True))
    assert all(not torch.equal(seen[a], seen[b]) for a, b in ((0, 1), (0, 2), (1, 2)))
    for layer in range(3):
        alone = sequence_positions(ids[1:2], SPAN, layer=layer, draw=draw)[0]
        assert torch.equal(seen[layer][1], alone)  # each row's own draw, by its tokens and the layer
    assert torch.equal(seen[0], sequence_positions(ids, SPAN, draw=draw))
    with torch.no_grad():
        assert at_eval.generate(ids[:, :5], 3, temperature=0).shape == (4, 8)
    with pytest.raises(ValueError, match=r"random_positions_at_eval: a forward with a KV cache; expected none"):
        at_eval(ids, cache=at_eval.new_cache())


def test_a_padded_training_batch_gives_each_document_its_rows_first_distances():
    randomized, _ = pair("alibi")
    seen = record_positions(randomized)
    ids = torch.randint(0, 13, (2, 9))
    mask = torch.tensor([[0, 0, 0, 1, 1, 1, 1, 1, 1], [1] * 9])
    torch.manual_seed(4)
    randomized(ids, attention_mask=mask, labels=ids)
    torch.manual_seed(4)
    rows = random_distances(2, 9, SPAN)  # the first layer's draw: the forward draws nothing else before it
    assert torch.equal(seen[0][0, 3:], rows[0, :6]) and torch.equal(seen[0][1], rows[1])
    assert (seen[0][0, :3] == 0).all()  # padding (never read) takes d_0
