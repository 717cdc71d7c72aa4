"""What the RULER tasks share: one vocabulary, the text form, the placing of units in a haystack, and the scoring
(exact match, and RULER's string_match_all as ``item_acc``: the fraction of the reference answers found)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from tra_attn import ModelConfig
from tra_attn.data import TASKS, make_task
from tra_attn.data.synthetic.ruler_haystack import insert_units
from tra_attn.data.synthetic.ruler_layout import (
    ANSWER,
    FILLER0,
    IDS,
    MARK,
    NOISE,
    NUM_FILLER,
    PAD,
    QUERY,
    SEP,
    SYMBOLS,
    WORD0,
    answer_items,
)
from tra_attn.metrics.accuracy import item_fractions

RULER_TASKS = [
    "ruler_common_words",
    "ruler_frequent_words",
    "ruler_niah_multikey",
    "ruler_niah_multiquery",
    "ruler_niah_multivalue",
    "ruler_niah_single",
    "ruler_variable_tracking",
]
LENGTH = {"ruler_common_words": 400}


def test_every_ruler_task_is_registered_with_one_vocabulary():
    assert sorted(name for name in TASKS if name.startswith("ruler_")) == RULER_TASKS
    ids = [PAD, MARK, SEP, QUERY, ANSWER, NOISE]
    assert ids == list(range(10, 16)) and FILLER0 == 16 and WORD0 == FILLER0 + NUM_FILLER == len(SYMBOLS)
    assert [IDS[s] for s in ("<pad>", "#", "=", "?", ":", ".")] == ids and IDS["a"] == FILLER0 and IDS["9"] == 9
    for name in RULER_TASKS:
        task = make_task(name)
        assert task.vocab_size == WORD0 + task.num_words
        batch = task.sample(4, LENGTH.get(name, 200), seed=0)
        assert not (batch.tokens == PAD).any()  # every sequence is exactly its length: no padding


@pytest.mark.parametrize("name", RULER_TASKS)
def test_text_form_round_trips_and_a_wrong_answer_is_refused(name, tmp_path):
    task = make_task(name)
    batch = task.sample(6, LENGTH.get(name, 200), seed=3)
    path = tmp_path / "data.txt"
    task.write_text(path, batch)
    (loaded,) = task.read_text(path)
    assert torch.equal(loaded.tokens, batch.tokens) and torch.equal(loaded.loss_mask, batch.loss_mask)
    tokens = batch.tokens[0].clone()
    last = int(batch.loss_mask[0].nonzero()[-1])
    tokens[last] = (tokens[last] + 1) % 10 if tokens[last] < 10 else WORD0 + (tokens[last] - WORD0 + 1) % task.num_words
    with pytest.raises(ValueError, match=rf"{name}: sequence .* answers .*; its context calls for"):
        task.encode_text(task.decode_text(tokens))


def test_unknown_tokens_and_padding_are_refused_in_text():
    task = make_task("ruler_niah_single", num_words=5)
    for word in ("<pad>", "w5", "w01", "q", "10"):
        with pytest.raises(ValueError, match=rf"unknown token '{word}'; expected digits, .* the words w0..w4"):
            task.encode_text(f"a {word} ? w1 : 1")


def test_answer_items_number_the_references():
    tokens = torch.tensor([[16, QUERY, 32, ANSWER, 1, 2, 3, 4, 5, 6], [QUERY, ANSWER, 1, 2, 3, 4, 5, 6, 7, 8]])
    assert answer_items(tokens, 2).tolist() == [[-1, -1, -1, -1, 0, 0, 1, 1, 2, 2], [-1, -1, 0, 0, 1, 1, 2, 2, 3, 3]]
    assert answer_items(tokens, 1)[0].tolist() == [-1, -1, -1, -1, 0, 1, 2, 3, 4, 5]


def test_item_fractions_count_the_items_with_every_token_right():
    items = torch.tensor([[0, 0, 1, 1, 2, 2], [0, 0, 1, 1, 2, 2], [0, 0, 0, 0, 0, 0]])
    scored = torch.tensor([[1, 1, 1, 1, 1, 1], [0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0]], dtype=torch.bool)
    correct = torch.tensor([[1, 0, 1, 1, 1, 1], [0, 0, 0, 1, 1, 1], [0, 0, 0, 0, 0, 0]], dtype=torch.bool)
    assert item_fractions(items, scored, correct).tolist() == [2 / 3, 1 / 2]  # the unscored row is left out


class Oracle(torch.nn.Module):
    """Predicts the true next token of ``tokens`` except at the (row, position) of ``wrong``."""

    def __init__(self, tokens: torch.Tensor, wrong: list[tuple[int, int]], vocab: int):
        super().__init__()
        self.config = ModelConfig(vocab_size=vocab, d_model=16, n_layers=1, n_heads=2)
        predicted = tokens[:, 1:].clone()
        for row, position in wrong:
            predicted[row, position - 1] = (predicted[row, position - 1] + 1) % vocab
        self.logits = F.one_hot(predicted, vocab).float()

    def forward(self, ids):
        return self.logits[: ids.shape[0], : ids.shape[1]]


def test_metrics_report_exact_match_and_rulers_fraction_of_references_found():
    task = make_task("ruler_niah_multivalue")  # four 7-digit values answered
    batch = task.sample(2, 120, seed=0)
    start = 120 - 28
    wrong = [(0, start + 7 + 3), (0, start + 7 + 5), (0, start + 21)]  # row 0: two digits of value 2, one of 4
    metrics = task.metrics(Oracle(batch.tokens, wrong, task.vocab_size), batch)
    assert metrics["full_seq_acc"] == 0.5 and metrics["token_acc"] == 1 - 3 / 56
    assert metrics["item_acc"] == (2 / 4 + 1) / 2  # RULER's string_match_all: row 0 found 2 of its 4 values
    words = make_task("ruler_frequent_words")
    batch = words.sample(4, 100, seed=0)
    metrics = words.metrics(Oracle(batch.tokens, [(1, 98), (2, 97), (2, 99)], words.vocab_size), batch)
    assert metrics["item_acc"] == (1 + 2 / 3 + 1 / 3 + 1) / 4 and metrics["full_seq_acc"] == 0.5


def test_insert_units_keeps_the_haystack_in_order_around_the_units():
    filler = torch.tensor([[16, 17, 18, 19]])
    units = torch.tensor([[[MARK, 40, SEP, 5], [MARK, 41, SEP, 0]]])
    widths = torch.tensor([[4, 3]])
    tokens, rank = insert_units(filler, units, widths, torch.tensor([[2.5, 0.2]], dtype=torch.float64))
    assert tokens.tolist() == [[MARK, 41, SEP, 16, 17, MARK, 40, SEP, 5, 18, 19]] and rank.tolist() == [[1, 0]]
    tokens, rank = insert_units(filler, units, widths, torch.tensor([[4.1, 4.7]], dtype=torch.float64))
    assert tokens.tolist() == [[16, 17, 18, 19, MARK, 40, SEP, 5, MARK, 41, SEP]] and rank.tolist() == [[0, 1]]
