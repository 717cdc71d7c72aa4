"""The ASEntmax suite's sort task: the target is the source sorted ascending (docs/asentmax_suite.md).

Follows deep-spin/asentmax at commit be54bd3f9cfb9f17c80a8d956ea827f5cf93d07d: the generator ``Sort`` of
scripts/generate_data.py (README: ``--task_type sort --seq_len 48 --vary_len 16 --vocab_size 32``), the data
config synthetic/configs/data/sort.yaml (folder ``sort/40M-tr_32-64_vt_64-4096_vocab_32``: 32 symbols, training
n in [32, 64], validation and tests n = 64..4096) and the experiment synthetic/configs/experiment/entmax/sort.yaml
(``loss_type: target``; tested with exact match and BLEU, checkpoints picked by BLEU: we report exact match,
``full_seq_acc``, and per-token accuracy, not BLEU). The layout and scoring: asentmax_source_target.py.

    <bos> 5 0 31 5 <sep> 0 5 5 31 <eos>
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...utils.checks import option
from ..task import register_task
from .asentmax_layout import longest_test_check
from .asentmax_source_target import SourceTarget, num_symbols_check


@register_task
@dataclass(frozen=True)
class AsentmaxSort(SourceTarget):
    """ASEntmax sort: n uniform tokens (repeats allowed), then the same tokens in ascending order."""

    num_symbols: int = option(32, "data tokens 0..num_symbols-1 (the authors' --vocab_size)", num_symbols_check)
    longest_test: int = option(
        4096, "the longest test seq_len n (tests at n = 64, 128, ... up to it)", longest_test_check
    )

    name = "asentmax_sort"
    what = "the source sorted ascending"

    def target(self, source: torch.Tensor) -> torch.Tensor:
        return source.sort(dim=1).values
