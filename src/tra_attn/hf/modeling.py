"""``TRAForCausalLM``: the library's ``TransformerLM`` as a Hugging Face causal LM, for every attention kind.

The wrapper holds a ``TransformerLM`` as ``self.model`` and adds nothing to the computation, so its
logits are the library model's. Decoding uses the library's own KV cache (``TRACache``), which also
holds the per-key extras some kinds need (FoX's cumulative gates, the TRA ablations' key gates):
``generate`` threads it through like any cache, and beam search reorders it. Padded batches (an
``attention_mask`` with zeros; left padding for ``generate``, as transformers expects of a decoder-only
model) compute, row by row, what each sequence computes alone; the cache keeps the prompt's segment ids.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
import torch.nn.functional as F
from transformers import GenerationMixin, PreTrainedModel
from transformers.modeling_outputs import CausalLMOutputWithPast

from ..layers import KVCache
from ..layers.alibi import ALiBiAttention
from ..models import IGNORE_INDEX, TransformerLM
from ..models.io import WEIGHTS_NAME, check_weights, read_config, stored_specs
from ..models.loss import outside_documents, token_cross_entropy
from ..ops.alibi import alibi_slopes
from .configuration import TRAConfig


class TRACache(KVCache):
    """The library's KV cache with the few methods ``transformers``' ``generate`` calls on a cache."""

    is_compileable = False  # buffers grow in place: not a static cache for torch.compile

    @property
    def is_linear(self) -> list[bool]:
        return [False] * len(self.layers)

    def get_seq_length(self, layer_idx: int = 0) -> int:
        return self.layers[layer_idx].length

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        """Beam search: keep, for every new beam, the cached keys, values and segment ids of the beam it came
        from."""
        self.select_batch(beam_idx)


class TRAPreTrainedModel(PreTrainedModel):
    config_class = TRAConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    _no_split_modules = ["Block"]

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """transformers' loader, after checking a local folder's stored tensors against its config's model
        (``check_stored_weights``): transformers casts integer tensors to float and fills missing ones with random
        values, with no error."""
        check_stored_weights(pretrained_model_name_or_path)
        return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)

    def tie_weights(self, *args, **kwargs) -> None:
        """transformers' tying, then the model's own parameters shared across layers: transformers' loader gives each
        stored tensor to its one name, and the other layers get it here (``TransformerLM.tie_shared_parameters``)."""
        super().tie_weights(*args, **kwargs)
        model = getattr(self, "model", None)
        if isinstance(model, TransformerLM):
            model.tie_shared_parameters()

    @torch.no_grad()
    def _init_weights(self, module) -> None:
        """TransformerLM initialises its own weights; only the non-persistent ALiBi slopes (not in any
        checkpoint) need restoring when transformers builds the model on the meta device."""
        if isinstance(module, ALiBiAttention):
            module.slopes.copy_(alibi_slopes(module.slopes.numel()).to(module.slopes.device))


class TRAForCausalLM(TRAPreTrainedModel, GenerationMixin):
    """``TransformerLM`` behind Hugging Face's causal-LM interface (forward, generate, pipelines)."""

    def __init__(self, config: TRAConfig):
        super().__init__(config)
        self.model = TransformerLM(config.to_model_config())
        self.post_init()

    @classmethod
    def _supports_default_dynamic_cache(cls) -> bool:
        return False  # the model brings its own cache (TRACache), created in forward

    def get_input_embeddings(self):
        return self.model.embed

    def set_input_embeddings(self, value) -> None:
        self.model.embed = value

    def get_output_embeddings(self):
        return self.model.lm_head

    def set_output_embeddings(self, value) -> None:
        self.model.lm_head = value

    def prepare_inputs_for_generation(self, input_ids, cache=None, attention_mask=None, **kwargs):
        """Only the tokens the cache has not seen yet; the rest of the state lives in the cache (segment ids of
        a padded prompt included). ``position_ids`` are not passed on: positions come from the mask.

        A prompt padded on the right is refused (``check_left_padding``); after the prompt, the pad id fed to
        rows that have finished is replaced by an id the model can embed (``fill_finished_rows``)."""
        if kwargs.get("inputs_embeds") is not None:
            raise ValueError("TRAForCausalLM.generate: inputs_embeds is not supported; expected input_ids")
        past = 0 if cache is None else cache.get_seq_length()
        prompt = kwargs.get("is_first_iteration") or (cache is not None and not past)
        if prompt or cache is None:  # only the prompt can end in padding (generate appends 1s to the mask)
            check_left_padding(attention_mask)
        if not prompt:
            input_ids = self.fill_finished_rows(input_ids)
        if cache is not None:
            input_ids = input_ids[:, past:]
        inputs = {"input_ids": input_ids, "cache": cache, "attention_mask": attention_mask}
        inputs.update(use_cache=kwargs.get("use_cache"), logits_to_keep=kwargs.get("logits_to_keep"))
        return inputs

    def fill_finished_rows(self, input_ids: torch.Tensor) -> torch.Tensor:
        """``input_ids`` with every id outside the vocabulary replaced by 0. After the prompt, such an id can only be
        the pad id ``generate`` feeds a row that has finished (the byte tokenizer's pad, 256, is outside the
        vocabulary so that the model never emits it): that row's outputs are discarded, but it must embed."""
        outside = (input_ids < 0) | (input_ids >= self.config.vocab_size)
        return input_ids.masked_fill(outside, 0)

    def forward(
        self,
        input_ids: torch.LongTensor,
        attention_mask: torch.Tensor | None = None,
        cache: TRACache | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | None = None,
        **kwargs,
    ) -> CausalLMOutputWithPast:
        """Logits of ``input_ids`` (continuing ``cache`` if given); with ``labels`` (the input ids, -100 to
        skip, shifted inside as in every Hugging Face causal LM) also the mean next-token loss.

        ``attention_mask``: 1 for a token, 0 for padding, left or right padding (docs/padding_and_packing.md);
        (B, S), or with a cache (B, past + S) as ``generate`` passes it, of which only the last S columns are
        read (the cache keeps its own segment ids). A padded row computes what it computes alone, and labels
        whose target is padding are ignored; the ids under padding are never read (any pad id will do). Token
        ids are range-checked when the cache is empty (the prompt), not at every decoding step.
        """
        if kwargs.get("inputs_embeds") is not None:
            raise ValueError("TRAForCausalLM: inputs_embeds is not supported; expected input_ids")
        if input_ids is None:
            raise ValueError("TRAForCausalLM: input_ids is None; expected a (batch, seq) tensor of token ids")
        past = 0 if cache is None else cache.get_seq_length()
        attention_mask = self.new_part(attention_mask, input_ids, past)
        if not past:  # ids outside the vocabulary (but under padding: never read): the native model's clear error
            self.model.check_input_ids(input_ids, attention_mask)
        use_cache = self.config.use_cache if use_cache is None else use_cache
        use_cache = use_cache and not self.model.draws_positions_at_eval  # each forward draws for the whole sequence
        if use_cache and cache is None and not self.training:
            cache = TRACache(self.config.n_layers)
        elif not use_cache:
            cache = None
        hidden, segments = self.model.hidden_states_and_segments(input_ids, cache, attention_mask=attention_mask)
        loss = None
        if labels is not None:
            shifted = F.pad(labels[:, 1:], (0, 1), value=IGNORE_INDEX)
            if segments is not None:  # no target in the padding is scored
                shifted = shifted.masked_fill(outside_documents(segments), IGNORE_INDEX)
            per_token = token_cross_entropy(hidden, self.model.lm_head, shifted)
            loss = per_token.sum() / (shifted != IGNORE_INDEX).sum().clamp(min=1)
        if logits_to_keep:
            hidden = hidden[:, -logits_to_keep:]
        return CausalLMOutputWithPast(loss=loss, logits=self.model.lm_head(hidden), cache=cache)

    @staticmethod
    def new_part(attention_mask: torch.Tensor | None, input_ids: torch.Tensor, past: int) -> torch.Tensor | None:
        """The columns of ``attention_mask`` that describe ``input_ids``: all of a (B, S) mask, the last S of a
        (B, past + S) one."""
        if attention_mask is None or not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() != 2:
            return attention_mask  # the model names what is wrong with it
        b, s = input_ids.shape
        if attention_mask.shape[1] == s:
            return attention_mask
        if past and attention_mask.shape[1] == past + s:
            return attention_mask[:, past:]
        expected = f"(B, S) = ({b}, {s})" + (f" or, with the cache, (B, past + S) = ({b}, {past + s})" if past else "")
        raise ValueError(f"TRAForCausalLM: attention_mask.shape = {tuple(attention_mask.shape)}; expected {expected}")


def check_left_padding(attention_mask) -> None:
    """Refuse a prompt whose last column is padding, as ``TransformerLM.generate`` does: ``generate`` appends
    each new token after the last column and reads its logits there, so a right-padded row would continue
    from its padding (``transformers`` only logs a warning and decodes wrong tokens)."""
    if not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() != 2:
        return  # none, or one the model names what is wrong with
    right = (attention_mask[:, -1] == 0).nonzero().flatten().tolist()
    if right:
        raise ValueError(
            f"TRAForCausalLM.generate: attention_mask[{right[0]}, -1] = 0; expected left padding (new tokens follow "
            "the last token of each row: pad prompts on the left, tokenizer.padding_side = 'left')"
        )


def safetensors_files(folder: Path) -> list[str]:
    """The safetensors files of a ``save_pretrained`` folder: the shards its index names, or its one file; none if
    it has neither. A ValueError for an index that is not one."""
    index = folder / f"{WEIGHTS_NAME}.index.json"
    if index.is_file():
        try:
            return sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as err:
            raise ValueError(f"from_pretrained: {index} is not a safetensors index ({err})") from None
    return [WEIGHTS_NAME] if (folder / WEIGHTS_NAME).is_file() else []


def check_stored_weights(folder) -> None:
    """A ValueError unless the safetensors files of a local Hugging Face folder hold exactly the tensors of its
    config's model (names, shapes, dtypes: ``models.io.check_weights``), read from the files' headers; nothing
    to check for a hub name, no name (weights given as ``state_dict``) or a folder without safetensors weights."""
    if not isinstance(folder, (str, os.PathLike)):
        return
    folder = Path(folder)
    files = safetensors_files(folder)
    if not files:
        return
    config, _ = read_config(folder)
    with torch.device("meta"):  # shapes and dtypes, no memory
        expected = TransformerLM(config).state_dict()
    prefix = f"{TRAPreTrainedModel.base_model_prefix}."
    stored = {}
    for name in files:
        try:
            stored.update(stored_specs(folder / name))
        except Exception as err:  # safetensors' own errors for a truncated or foreign file
            raise ValueError(f"from_pretrained: {folder / name} is not a safetensors file ({err})") from None
    where = f"from_pretrained: {folder}"
    check_weights(stored, {prefix + name: tensor for name, tensor in expected.items()}, where)
