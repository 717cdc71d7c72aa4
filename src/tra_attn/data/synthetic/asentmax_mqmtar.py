"""The ASEntmax suite's multi-query multi-token associative recall (MQMTAR): multi-token keys bound to
multi-token values among spaces, then queried keys whose values are the target (docs/asentmax_suite.md). Not the
library's ``mqar`` (Zoology's single-token MQAR).

Follows deep-spin/asentmax at commit be54bd3f9cfb9f17c80a8d956ea827f5cf93d07d: the generator
``MultiQueryMultiTokenRecall`` of scripts/generate_data.py (README "MQMTAR": ``--vocab_size 10000 --seq_len 48
--vary_len 16 --mdps_seq_len "64 ... 65536" --abc_size 256 --k_len 2 --v_len 2 --num_q 4 --num_kv 0.8``), the data
config synthetic/configs/data/mqmtar.yaml (folder ``mqmtar/50M_abc-256_vocab-10K_kv-len-2_num_kv-80_num_q-4``;
``src_pattern: "{bos_token} {text} {sep_token}"``, ``trg_pattern: "{text} {eos_token}"``,
``SimpleTokenizer(max_vocab_id=259)``) and the experiment synthetic/configs/experiment/entmax/mqmtar.yaml
(``loss_type: target``, exact match). Token ids as theirs: space 0, key-value separator 1, query separator 2,
the alphabet 3..abc_size+2; their max_vocab_id is abc_size + 3 (259), so id abc_size + 3 is never used, then
pad, bos, eos, mask, sep.

For a seq_len s their generator takes num_kv = int(s * num_kv_fraction // (k_len + v_len + 2)) pairs (at most
the vocabulary's num_words) and lays each in a row of W = s // num_kv tokens: spaces, the key, 1, the value, a
space, spaces, the pair's place in its row drawn as their random deletion of the surplus spaces of a row twice as
wide does (the kept spaces a uniform subset of its free places). Keys are distinct and values are distinct (drawn
without replacement from a vocabulary of num_words keys and num_words values, chosen once per generated file).
As theirs, training draws from one vocabulary, the same for every run (``sample``: theirs is the training file's),
and each test split from one of its own (``test_sample``), so most test words were never seen in training (about
85% of the keys at their defaults). Validation reads the training vocabulary: it chooses rates and detects the fit
on the training distribution, where the authors' validation files have vocabularies of their own. num_q queries
follow, each 2 and a key drawn uniformly (with repeats) from the sample's pairs; the target is, per query, 2 and
its value. Scored: the target and the <eos>.

Lengths: a sequence has 3 + num_kv * W + num_q (k_len + v_len + 2) tokens. Several s give the same num_kv and W,
so a ``length`` names the smallest such s (``seq_len_of``); the tests at the authors' s = 64 ... 65536 build
exactly their layouts. Their training draws s uniformly in [32, 64]; a length spread draws the distinct lengths
those s give uniformly (9 lengths in 59..91, and 90, which s = 68 gives): not their weights.

Grammar:

    sequence := <bos> row{num_kv} query{num_q} <sep> answer{num_q} <eos>      exactly `length` tokens
    row      := 0* key 1 value 0 0*        W tokens
    query    := 2 key                      a key of the rows
    answer   := 2 value                    the value bound to that query's key

    <bos> 0 0 17 200 1 45 3 0 0 ... 2 17 200 <sep> 2 45 3 <eos>
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from ...utils.checks import in_range, int_in_range, is_int, option
from ..task import EvalSplit, Task, TaskBatch, register_task
from .asentmax_layout import (
    AuthorsTests,
    Specials,
    after_first,
    check_num,
    decode_words,
    encode_words,
    longest_test_check,
    malformed,
    mean,
    seq_len_splits,
)

SPACE, KV_SEP, Q_SEP, ALPHA0 = 0, 1, 2, 3
MAX_SPACE = 1 << 24  # the largest key (value) space whose vocabulary we draw by permutation


@functools.lru_cache(maxsize=4096)
def _smallest_seq_len(fraction: float, unit: int, num_words: int, num_q: int, prefix: int) -> int | None:
    """The smallest s whose rows take ``prefix`` tokens with at least num_q pairs, or None."""
    if prefix < 1:
        return None
    high = math.ceil(prefix / (1.0 - fraction / unit)) + unit + 2
    if prefix >= num_words:
        high = max(high, prefix + num_words)
    for s in range(prefix, high + 1):
        pairs = min(int(s * fraction // unit), num_words)
        if pairs >= max(num_q, 1) and pairs * (s // pairs) == prefix:
            return s
    return None


TRAIN_VOCABULARY_SEED = 20250616  # the one training vocabulary of every run (the paper's arXiv date)


@functools.cache
def _training_vocabulary(abc_size: int, k_len: int, v_len: int, num_words: int) -> tuple[torch.Tensor, torch.Tensor]:
    task = AsentmaxMQMTAR(abc_size=abc_size, k_len=k_len, v_len=v_len, num_words=num_words)
    return task._vocabulary(torch.Generator().manual_seed(TRAIN_VOCABULARY_SEED))


@register_task
@dataclass(frozen=True)
class AsentmaxMQMTAR(AuthorsTests, Task):
    """ASEntmax MQMTAR: multi-token key-value pairs among spaces, queried keys, their values as the target."""

    abc_size: int = option(256, "alphabet of key and value tokens (the authors' --abc_size)", int_in_range(2))
    num_words: int = option(
        10000, "keys (and values) in a split's vocabulary (the authors' --vocab_size)", int_in_range(1)
    )
    k_len: int = option(2, "tokens per key (the authors' --k_len)", int_in_range(1))
    v_len: int = option(2, "tokens per value (the authors' --v_len)", int_in_range(1))
    kv_fraction: float = option(
        0.8,
        "share of seq_len given to pairs, in (0, 1] (the authors' --num_kv)",
        in_range(0.0, 1.0, high_allowed=True, low_allowed=False),
    )
    num_q: int = option(4, "queries per sequence (the authors' --num_q)", int_in_range(1))
    longest_test: int = option(65536, "the longest test seq_len (tests at 64, 128, ... up to it)", longest_test_check)

    name = "asentmax_mqmtar"
    authors_train_seq_len: ClassVar[tuple[int, int]] = (32, 64)  # --seq_len 48 --vary_len 16

    def __post_init__(self):
        super().__post_init__()
        for what, size in (("k_len", self.k_len), ("v_len", self.v_len)):
            space = self.abc_size**size
            if space > MAX_SPACE:
                raise ValueError(
                    f"{self.name}: abc_size ** {what} = {space}; expected at most {MAX_SPACE} possible words"
                )
            if self.num_words > space:
                raise ValueError(
                    f"{self.name}: num_words = {self.num_words}; expected at most abc_size ** {what} = {space}, the "
                    f"distinct words of {size} tokens from {self.abc_size}"
                )
        low = self.authors_train_seq_len[0]
        if self.layout(low) is None:
            raise ValueError(
                f"{self.name}: num_q = {self.num_q} queries need that many pairs, and the shortest training seq_len "
                f"{low} holds {self.pairs(low)} at kv_fraction = {self.kv_fraction}; expected num_q <= "
                f"{self.pairs(low)}"
            )

    @property
    def specials(self) -> Specials:
        return Specials(self.abc_size + 3)

    @property
    def vocab_size(self) -> int:
        return self.specials.end

    @property
    def unit(self) -> int:
        """Tokens of a pair in its row: key, 1, value, and the space after it."""
        return self.k_len + self.v_len + 2

    def pairs(self, seq_len: int) -> int:
        return min(int(seq_len * self.kv_fraction // self.unit), self.num_words)

    def layout(self, seq_len: int) -> tuple[int, int] | None:
        """(num_kv, W) of the authors' seq_len, None if it holds fewer than num_q pairs."""
        pairs = self.pairs(seq_len)
        return (pairs, seq_len // pairs) if pairs >= self.num_q else None

    def length_of(self, seq_len: int) -> int:
        pairs, width = self.layout(seq_len)
        return 3 + pairs * width + self.num_q * (self.k_len + self.v_len + 2)

    def seq_len_of(self, length: int) -> int | None:
        prefix = length - 3 - self.num_q * (self.k_len + self.v_len + 2)
        return _smallest_seq_len(self.kv_fraction, self.unit, self.num_words, self.num_q, prefix)

    def check_length(self, length) -> int:
        if not is_int(length) or length < 1 or self.seq_len_of(length) is None:
            shortest = self.length_of(next(s for s in range(1, 10**6) if self.layout(s) is not None))
            raise ValueError(
                f"{self.name}: length = {length!r}; expected a length the authors' layout makes, 3 + num_kv * "
                f"(seq_len // num_kv) + {self.num_q * (self.k_len + self.v_len + 2)} tokens for some seq_len (at "
                f"least {shortest}; e.g. {self.length_of(64)} for seq_len = 64)"
            )
        return length

    def sample(self, num: int, length: int, seed: int) -> TaskBatch:
        """``num`` sequences of ``length`` tokens over the training vocabulary, the same for every seed and run (the
        authors generate one training set); the same seed gives the same sequences. Validation reads it too."""
        key_words, value_words = _training_vocabulary(self.abc_size, self.k_len, self.v_len, self.num_words)
        return self._sample(num, length, torch.Generator().manual_seed(seed), key_words, value_words)

    def test_sample(self, num: int, length: int, seed: int) -> TaskBatch:
        """As ``sample``, over a vocabulary of the split's own drawn from ``seed``: as in the authors' test files,
        most of its keys and values never occurred in training."""
        gen = torch.Generator().manual_seed(seed)
        return self._sample(num, length, gen, *self._vocabulary(gen))

    def _vocabulary(self, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """num_words distinct keys and num_words distinct values (their pre_generate), as alphabet ids."""
        keys = torch.randperm(self.abc_size**self.k_len, generator=gen)[: self.num_words]
        values = torch.randperm(self.abc_size**self.v_len, generator=gen)[: self.num_words]
        return self._words(keys, self.k_len), self._words(values, self.v_len)

    def _sample(self, num: int, length: int, gen, key_words: torch.Tensor, value_words: torch.Tensor) -> TaskBatch:
        self.check_length(length)
        check_num(self.name, num)
        pairs, width = self.layout(self.seq_len_of(length))
        k, v, sp = self.k_len, self.v_len, self.specials
        pick = torch.rand(num, self.num_words, generator=gen).argsort(dim=1, stable=True)[:, :pairs]
        keys = key_words[pick]  # (num, pairs, k)
        pick = torch.rand(num, self.num_words, generator=gen).argsort(dim=1, stable=True)[:, :pairs]
        values = value_words[pick]
        # Where the pair sits in its row: their row of Z = 2 (W + 1) spaces, the pair at Z // 2 - (k + v + 1) // 2,
        # then all but W - unit of the other Z - unit places deleted at random; the kept ones left of it count.
        z = 2 * (width + 1)
        start, free, keep = z // 2 - (k + v + 1) // 2, z - self.unit, width - self.unit
        rows = num * pairs
        kept = torch.rand(rows, free, generator=gen).argsort(dim=1, stable=True)[:, :keep]
        offset = (kept < start).sum(dim=1).view(num, pairs)
        unit = torch.cat([keys, torch.full((num, pairs, 1), KV_SEP), values, torch.full((num, pairs, 1), SPACE)], 2)
        body = torch.full((num, pairs, width), SPACE)
        body.scatter_(2, offset[..., None] + torch.arange(self.unit), unit)
        asked = torch.randint(pairs, (num, self.num_q), generator=gen)
        q_sep = torch.full((num, self.num_q, 1), Q_SEP)
        queries = torch.cat([q_sep, keys.gather(1, asked[..., None].expand(-1, -1, k))], 2).view(num, -1)
        answers = torch.cat([q_sep, values.gather(1, asked[..., None].expand(-1, -1, v))], 2).view(num, -1)
        column = torch.zeros(num, 1, dtype=torch.long)
        tokens = torch.cat(
            [column + sp.bos, body.view(num, -1), queries, column + sp.sep, answers, column + sp.eos], dim=1
        )
        return TaskBatch(tokens, self.loss_mask(tokens))

    def _words(self, index: torch.Tensor, size: int) -> torch.Tensor:
        """(W,) word numbers -> (W, size) alphabet ids (their base-abc_size digits)."""
        powers = self.abc_size ** torch.arange(size - 1, -1, -1)
        return index[:, None] // powers % self.abc_size + ALPHA0

    def eval_splits(self, train_length: int, sequences: int) -> list[EvalSplit]:
        """``test`` at seq_len 64, 128, ... up to ``longest_test`` (asentmax_layout.seq_len_splits), each over a
        vocabulary of its own (``test_sample``)."""
        return seq_len_splits(self, train_length, sequences, self.test_sample)

    def encode_text(self, line: str) -> torch.Tensor:
        """Token ids of a line, validating the grammar and that every answer is the value bound to its query."""
        sp, k, v, q = self.specials, self.k_len, self.v_len, self.num_q
        ids = encode_words(self.name, line, sp, sp.max_vocab_id + 1)
        alphabet = range(ALPHA0, ALPHA0 + self.abc_size)
        tail = q * (v + 1) + 1
        shape = len(ids) > tail + q * (k + 1) + 2 and ids[0] == sp.bos and ids[-1] == sp.eos
        shape = shape and ids[-tail - 1] == sp.sep and ids.count(sp.sep) == 1
        groups = [ids[-tail - 1 - q * (k + 1) :][i * (k + 1) : (i + 1) * (k + 1)] for i in range(q)]
        groups += [ids[-tail:-1][i * (v + 1) : (i + 1) * (v + 1)] for i in range(q)]
        shape = shape and all(g[0] == Q_SEP and all(t in alphabet for t in g[1:]) for g in groups)
        if not shape:
            raise malformed(
                self.name, line, f"expected <bos>, the pairs, {q} queries (2 and {k} key tokens), <sep>, {q} answers "
                f"(2 and {v} value tokens), <eos>"
            )  # fmt: skip
        body = ids[1 : -tail - 1 - q * (k + 1)]
        bound = {}
        for i, t in enumerate(body):
            if t == KV_SEP:
                key, value = tuple(body[max(i - k, 0) : i]), tuple(body[i + 1 : i + 1 + v])
                if len(key) < k or len(value) < v or not all(x in alphabet for x in key + value) or key in bound:
                    raise malformed(self.name, line, f"the pair at token {i + 1} is not {k} key tokens, 1, {v} "
                                    f"value tokens with a key of its own")  # fmt: skip
                bound[key] = value
        for i in range(q):
            key, answer = tuple(groups[i][1:]), tuple(groups[q + i][1:])
            if bound.get(key) != answer:
                expected = "an unbound key" if key not in bound else f"{' '.join(map(str, bound[key]))}"
                raise malformed(self.name, line, f"query {i} is answered {' '.join(map(str, answer))}; the pairs "
                                f"bind its key to {expected}")  # fmt: skip
        return torch.tensor(ids)

    def decode_text(self, tokens: torch.Tensor) -> str:
        return decode_words(tokens, self.specials)

    def loss_mask(self, tokens: torch.Tensor) -> torch.Tensor:
        """True at the answers and the <eos>: every token after the <sep>."""
        return after_first(tokens, self.specials.sep)

    def statistics(self, batch: TaskBatch) -> dict:
        """The authors' seq_len, pairs per sequence, the space fraction of the rows and the scored tokens."""
        tokens = batch.tokens
        num, length = tokens.shape
        prefix = length - 3 - self.num_q * (self.k_len + self.v_len + 2)
        body = tokens[:, 1 : 1 + prefix]
        return {
            "sequences": num,
            "length": length,
            "seq_len": self.seq_len_of(length),
            "pairs_per_sequence": mean((body == KV_SEP).sum(1)),
            "space_fraction": mean(body == SPACE),
            "scored_per_sequence": batch.loss_mask.sum().item() / max(num, 1),
        }
