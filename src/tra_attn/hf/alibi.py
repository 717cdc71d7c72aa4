"""ALiBi (Press, Smith, Lewis, ICLR 2022) inside transformers' own classes: ``attn_implementation="tra_attn.alibi"``,
through the mechanism of ``attach.py`` (``add_attention(model, kind="alibi", rope="remove")``).

    out_i = sum_{j <= i} softmax_j(scaling * q_i . k_j - m_h (i - j)) v_j

The library's op (``ops/alibi.py``, the authors' fixed geometric slopes m_h for the model's query heads) on the q, k
and v the model gives, at the model's own ``scaling``. No gate, nothing learned: the conversion only changes the
attention function (and, with ``rope="remove"``, the rotation). In a left-padded row, i and j count the row's tokens
only, so padding shifts nothing.
"""

from __future__ import annotations

from torch import nn

from ..ops.alibi import alibi_attention, alibi_slopes
from .attach import Kind, check_converted, check_rope, register, repeat_groups, segments_of, trim_to_mask

NAME = "tra_attn.alibi"
KEY = "alibi_attention"
SETTINGS = ("rope",)


def attention_forward(module: nn.Module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """transformers' attention-function contract (as ``interface.attention_forward``) -> ((B, Sq, H, D), None)."""
    check_converted(module, NAME, "alibi", "ALiBi")
    key, value, attention_mask = trim_to_mask(key, value, attention_mask)
    key, value = repeat_groups(query, key, value)
    slopes = alibi_slopes(query.shape[1]).to(query.device)
    out = alibi_attention(query, key, value, slopes, scale=scaling, segment_ids=segments_of(attention_mask))
    return out.transpose(1, 2).contiguous(), None


register(NAME, attention_forward, KEY, "ALiBi")


def checked_settings(caller: str, *, rope: str = "remove") -> dict:
    """ALiBi's settings as ``config.alibi_attention`` holds them, or a ValueError naming ``caller``."""
    return {"rope": check_rope(rope, caller)}


KIND = Kind("alibi", NAME, KEY, SETTINGS, checked_settings, None)
