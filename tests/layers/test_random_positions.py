"""Randomized positional encodings (Ruoss et al., ACL 2023) as the ``random_positions`` option of the position-based
kinds: training forwards draw one sorted random subset of [0, N) per row, shared by every layer; evaluation and
generation use plain positions, or with ``random_positions_at_eval`` draw them too (a draw per sequence, a function
of its tokens); resuming a run repeats the draws; no graph break."""

from __future__ import annotations

import dataclasses
import shutil

import pytest
import torch

from tests.training.test_train import assert_same_weights, losses, tiny
from tra_attn import ModelConfig, TransformerLM
from tra_attn.ops.positions import random_positions, sequence_positions
from tra_attn.training import train

KINDS = ["rope", "alibi", "t5", "fire", "kerple"]
SPAN = 50


def pair(kind: str, at_eval: bool = False, **fields) -> tuple[TransformerLM, TransformerLM]:
    """The same weights with random positions in [0, SPAN) (also at evaluation if ``at_eval``) and without."""
    config = ModelConfig(vocab_size=13, d_model=16, n_layers=3, n_heads=2, attention=kind, **fields)
    torch.manual_seed(0)
    plain = TransformerLM(config)
    with torch.no_grad():  # T5's table starts at zero (no positions at all): give it values
        for p in plain.parameters():
            p.add_(0.1 * torch.randn_like(p))
    options = dataclasses.replace(config.attention_options, random_positions=SPAN, random_positions_at_eval=at_eval)
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
    randomized, plain = pair(kind)
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
    at_eval, plain = pair(kind, at_eval=True)
    training, _ = pair(kind)
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
