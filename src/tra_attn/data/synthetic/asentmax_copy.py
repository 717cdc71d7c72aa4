"""The ASEntmax suite's copy task: the target is the source (docs/asentmax_suite.md).

Follows deep-spin/asentmax at commit be54bd3f9cfb9f17c80a8d956ea827f5cf93d07d: the generator ``Copy`` of
scripts/generate_data.py (README: ``--task_type copy --seq_len 48 --vary_len 16 --vocab_size 32``), the data
config synthetic/configs/data/copy.yaml (folder ``copy/20M_V-32_tr-32-64_val_64-512_t-64-4096``: 32 symbols,
training n in [32, 64], tests n = 64..4096) and the experiment synthetic/configs/experiment/entmax/copy.yaml
(``loss_type: target``, exact match). The layout and scoring: asentmax_source_target.py.

    <bos> 5 0 31 <sep> 5 0 31 <eos>
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
class AsentmaxCopy(SourceTarget):
    """ASEntmax copy: n uniform tokens, then the same n tokens (the authors' generator, ids and scoring)."""

    num_symbols: int = option(32, "data tokens 0..num_symbols-1 (the authors' --vocab_size)", num_symbols_check)
    longest_test: int = option(
        4096, "the longest test seq_len n (tests at n = 64, 128, ... up to it)", longest_test_check
    )

    name = "asentmax_copy"
    what = "the source"

    def target(self, source: torch.Tensor) -> torch.Tensor:
        return source.clone()
