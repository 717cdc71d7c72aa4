"""Inference-time RoPE scaling, the baselines users reach for first: a trained RoPE model with transformers' own
linear, dynamic NTK or YaRN scaling, its weights unchanged.

transformers 5 spells it ``config.rope_parameters = {"rope_type": ..., "factor": ..., "rope_theta": ...}``
(``modeling_rope_utils.py``; the 4.x ``rope_scaling`` dict is still read into it). What each does at a factor f:

- ``linear``: every position is divided by f, at every length (a 1x input changes too, unless f = 1);
- ``dynamic`` (NTK): the rotary base grows once an input is longer than ``max_position_embeddings`` (here the
  training length), to base * (f * S / L - (f - 1))^(d / (d - 2)) at S tokens; inputs of at most L are unchanged
  on a fresh model (transformers keeps a grown base for later inputs of L tokens, and resets it below L only);
- ``yarn``: the frequencies are interpolated by f below a wavelength ramp and kept above it, and cos and sin are
  scaled by 0.1 ln(f) + 1, at every length; ``original_max_position_embeddings`` is the training length.

At f = 1 linear and YaRN are the unscaled model at every length; dynamic NTK is on inputs of at most L tokens.
"""

from __future__ import annotations

SCALINGS = {"linear": "linear", "dynamic": "dynamic NTK", "yarn": "YaRN"}


def rope_scaled(model, rope_type: str, factor: float, train_length: int):
    """A copy of the RoPE model ``model`` (a transformers model whose config has ``rope_parameters`` of rope_type
    'default') with ``rope_type`` scaling at ``factor`` for a model trained on ``train_length`` tokens, in eval
    mode; a ValueError for another rope_type or a model without RoPE parameters."""
    if rope_type not in SCALINGS:
        raise ValueError(f"rope_scaled: rope_type = {rope_type!r}; expected one of {sorted(SCALINGS)}")
    if not (isinstance(factor, (int, float)) and factor >= 1):
        raise ValueError(f"rope_scaled: factor = {factor!r}; expected a number >= 1")
    current = getattr(model.config, "rope_parameters", None)
    if not isinstance(current, dict) or current.get("rope_type") != "default":
        raise ValueError(
            f"rope_scaled: {type(model).__name__} has rope_parameters {current!r}; expected an unscaled RoPE model "
            "(rope_type 'default')"
        )
    parameters = {"rope_type": rope_type, "factor": float(factor), "rope_theta": current["rope_theta"]}
    longest = train_length
    if rope_type == "yarn":
        parameters["original_max_position_embeddings"] = train_length
        longest = round(factor * train_length)
    fields = {**model.config.to_dict(), "rope_parameters": parameters, "max_position_embeddings": longest}
    scaled = type(model)(type(model.config).from_dict(fields))
    scaled.load_state_dict(model.state_dict())
    return scaled.to(next(model.parameters()).device).eval()
