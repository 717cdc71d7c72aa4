"""Token ids: the integer dtypes a model accepts, and their conversion to one the embedding indexes with."""

from __future__ import annotations

import torch

# Any of these is a valid batch of token ids; the embedding indexes with int64 and int32 only, so the others
# are converted to int64 on the way in (a uint8 batch of a small vocabulary just works).
INTEGER_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)
INDEX_DTYPES = (torch.int64, torch.int32)


def as_index(input_ids: torch.Tensor) -> torch.Tensor:
    """Token ids (of a dtype in ``INTEGER_DTYPES``) as int64 or int32: those two as they are, the others as int64."""
    return input_ids if input_ids.dtype in INDEX_DTYPES else input_ids.long()
