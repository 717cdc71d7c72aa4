"""What the RULER tasks share (the ``ruler_*`` tasks; docs/ruler_suite.md): one vocabulary of synthetic tokens,
the text form, where the answer sits, parameter checks, the test lengths and the scoring.

RULER (Hsieh et al. 2024, arXiv 2404.06654) is followed at NVIDIA/RULER commit
c3f5e3b4f87f97e048793bb510a3a6b19a46bf3a: the generators of scripts/data/synthetic/ (niah.py,
variable_tracking.py, common_words_extraction.py, freq_words_extraction.py), their configurations in
scripts/synthetic.yaml, the prompt templates in scripts/data/synthetic/constants.py and the metrics in
scripts/eval/synthetic/constants.py. Their prompts are English sentences for an instruction-following model; ours
are a few special tokens, the same for every task:

    sequence := context '?' query ':' answer        exactly `length` tokens; the answer is scored

Vocabulary (one place for every RULER task; ``vocab_size = WORD0 + num_words``):

    '0'..'9'   ids 0-9    digits, the values (RULER's digit strings)
    '<pad>'    10         padding; no generated sequence holds it (every sequence is exactly `length` tokens)
    '#'        11         opens a needle or an assignment (RULER's "One of the special magic numbers for", "VAR")
    '='        12         between a key (a variable) and its value (RULER's "is:", "=")
    '?'        13         opens the query (RULER's question)
    ':'        14         closes it; the answer follows (RULER's answer prefix)
    '.'        15         the frequent-words task's noise word (RULER's '...', its top-ranked word)
    'a'..'p'   16-31      the haystack's filler symbols
    'w0'...    32...      words: needle keys, variable names, the words of the word lists

Scoring: the tokens after ':' (``answer_mask``). Their full-sequence accuracy is exact match on the whole answer;
RULER's metric, ``string_match_all``, is the fraction of the reference answers found in the generation, which
``metrics`` reports as ``item_acc`` (each reference an item: a value's digits, or one word).
"""

from __future__ import annotations

import dataclasses
import math
import string

import torch

from ...utils.checks import is_int
from ..task import TEST_SEED, EvalSplit, Task, TaskBatch
from .density_splits import check_num  # noqa: F401 (the suite's modules import it here)
from .passkey import LENGTH_FACTORS

FULL_TEST_FACTOR = 4  # the longest test length, in training lengths, whose splits hold the whole budget

RULER_COMMIT = "c3f5e3b4f87f97e048793bb510a3a6b19a46bf3a"
PAD, MARK, SEP, QUERY, ANSWER, NOISE = 10, 11, 12, 13, 14, 15
FILLER0, NUM_FILLER = 16, 16
WORD0 = FILLER0 + NUM_FILLER
SYMBOLS = [*string.digits, "<pad>", "#", "=", "?", ":", ".", *string.ascii_lowercase[:NUM_FILLER]]
IDS = {symbol: i for i, symbol in enumerate(SYMBOLS)}
HAYSTACKS = ("noise", "essay")  # RULER's type_haystack values we build (docs/ruler_suite.md: 'needle' is not)


def haystack_kind(value) -> str | None:
    """The check of a task's ``haystack``: one of HAYSTACKS."""
    if value in HAYSTACKS:
        return None
    return (
        f"one of {list(HAYSTACKS)} ('noise': the filler symbols repeated in a cycle; 'essay': filler symbols drawn "
        "at random)"
    )


def round_half_up(x: float) -> int:
    return math.floor(x + 0.5)


def is_word(tokens: torch.Tensor) -> torch.Tensor:
    return tokens >= WORD0


def is_filler(tokens: torch.Tensor) -> torch.Tensor:
    return (tokens >= FILLER0) & (tokens < WORD0)


def answer_mask(tokens: torch.Tensor) -> torch.Tensor:
    """True at every token after the answer marker ':'."""
    mask = torch.zeros_like(tokens, dtype=torch.bool)
    mask[:, 1:] = (tokens == ANSWER).cumsum(dim=1)[:, :-1] > 0
    return mask


def answer_items(tokens: torch.Tensor, width: int) -> torch.Tensor:
    """The answer item of every token after ':' (its index in the answer // ``width``), -1 before."""
    offset = (tokens == ANSWER).long().cumsum(dim=1).clamp(max=1).cumsum(dim=1) - 2
    return torch.where(offset >= 0, offset.div(width, rounding_mode="floor"), -1)


def digits_of(numbers: torch.Tensor, num_digits: int) -> torch.Tensor:
    """(..., num_digits) decimal digits of each number, most significant first (the digits' token ids)."""
    powers = 10 ** torch.arange(num_digits - 1, -1, -1)
    return numbers[..., None].div(powers, rounding_mode="floor") % 10


def mean(values: torch.Tensor) -> float:
    return values.double().mean().item() if values.numel() else math.nan


class RulerTask(Task):
    """The part every RULER task shares: vocabulary, text form, scored answer and metrics. A task defines
    ``sample``, ``min_length``, ``eval_splits``, ``item_width`` and ``solve`` (the answer its context and query
    call for, which ``encode_text`` checks a line against)."""

    num_words: int

    @property
    def vocab_size(self) -> int:
        return WORD0 + self.num_words

    def full_test_length(self, train_length: int) -> int:
        """Every split to 4x the training length holds the evaluation budget's sequences (100 on the cpu preset: a
        cell moves by 0.01 per sequence); 8x and 16x as many tokens as 4x, which the O(S^2) kinds need on CPU."""
        return FULL_TEST_FACTOR * train_length

    @property
    def item_width(self) -> int:
        """Tokens per reference answer (one value's digits, or one word)."""
        return 1

    def min_length(self) -> int:
        raise NotImplementedError

    def length_problem(self, length: int) -> str | None:
        """Why no sequence of ``length`` tokens exists beyond the minimum (a task's own limit), or None."""
        return None

    def check_length(self, length) -> int:
        low = self.min_length()
        if not is_int(length) or length < low:
            raise ValueError(f"{self.name}: length = {length!r}; expected an integer >= {low} ({self.what_fits()})")
        problem = self.length_problem(length)
        if problem:
            raise ValueError(f"{self.name}: length = {length}: {problem}")
        return length

    def what_fits(self) -> str:
        """The parts of the shortest sequence, for the message of a length too short."""
        return "the needles, the query and the answer, and one haystack token"

    def eval_splits(self, train_length: int, sequences: int) -> list[EvalSplit]:
        """One split ('iid') at each of 1x, 2x, 4x, 8x and 16x the training length; split k uses TEST_SEED + k.
        Every length is checked before any is generated (common words' vocabulary must hold the longest)."""
        lengths = [factor * train_length for factor in LENGTH_FACTORS]
        for length in lengths:
            self.check_length(length)
        return [
            EvalSplit(
                "iid",
                dataclasses.asdict(self),
                self.sample(self.split_size(sequences, train_length, length), length, TEST_SEED + index),
            )
            for index, length in enumerate(lengths)
        ]

    def solve(self, context: list[int], query: list[int]) -> list[int]:
        """The answer the context and the query call for; a ValueError (its text without the task's name) if
        they break the task's grammar."""
        raise NotImplementedError

    def metrics(self, model, batch: TaskBatch) -> dict:
        """Exact match (``full_seq_acc``), per-token accuracy, and ``item_acc``: RULER's string_match_all."""
        from ...metrics import sequence_metrics

        items = answer_items(batch.tokens, self.item_width)
        return sequence_metrics(model, batch.tokens, batch.loss_mask, items=items)

    def loss_mask(self, tokens: torch.Tensor) -> torch.Tensor:
        return answer_mask(tokens)

    def decode_text(self, tokens: torch.Tensor) -> str:
        return " ".join(SYMBOLS[t] if t < WORD0 else f"w{t - WORD0}" for t in tokens.tolist())

    def encode_text(self, line: str) -> torch.Tensor:
        """'a b # w3 = 1 2 ? w3 : 1 2' -> token ids, checking the grammar and that the answer is the one the
        context and the query call for."""
        text = line.strip()
        ids = [self._word_id(word, text) for word in text.split()]
        if ids.count(QUERY) != 1 or ids.count(ANSWER) != 1 or ids.index(QUERY) > ids.index(ANSWER):
            raise ValueError(f"{self.name}: malformed sequence {text[:40]!r}; expected one '?' and then one ':'")
        question, colon = ids.index(QUERY), ids.index(ANSWER)
        try:
            expected = self.solve(ids[:question], ids[question + 1 : colon])
        except ValueError as err:
            raise ValueError(f"{self.name}: malformed sequence {text[:40]!r}: {err}") from None
        answer = ids[colon + 1 :]
        if answer != expected:
            words = self.decode_text(torch.tensor(expected, dtype=torch.long))
            got = self.decode_text(torch.tensor(answer, dtype=torch.long))
            raise ValueError(f"{self.name}: sequence {text[:40]!r} answers {got!r}; its context calls for {words!r}")
        return torch.tensor(ids)

    def _word_id(self, word: str, text: str) -> int:
        if word in IDS and word != "<pad>":
            return IDS[word]
        number = word[1:]
        canonical = word[:1] == "w" and number.isascii() and number.isdigit() and str(int(number)) == number
        if canonical and int(number) < self.num_words:
            return WORD0 + int(number)
        raise ValueError(
            f"{self.name}: malformed sequence {text[:40]!r}: unknown token {word!r}; expected digits, '#', '=', '?', "
            f"':', '.', the filler 'a'..{SYMBOLS[WORD0 - 1]!r} or the words w0..w{self.num_words - 1}"
        )

    def base_statistics(self, batch: TaskBatch) -> dict:
        tokens = batch.tokens
        n, length = tokens.shape
        answer = answer_mask(tokens).sum(dim=1)
        return {"sequences": n, "length": length, "answer_length": mean(answer)}
