"""The retrofit experiment's budgets, each the budget of a language-model preset (``experiments/lm/presets.py``) on
transformers' Llama: ``cpu`` (byte-level Austen: five novels to train, Persuasion to validate; 4 layers, d_model 128,
4 heads; 600 steps of 32 x 128 tokens; AdamW, weight decay 0.1, warm-up 50, cosine to 0.1 of the peak; evaluated on
the last 65,536 Persuasion bytes at 1x-16x, each continuation's rate chosen on the 65,536 before them) and ``tiny``
(a smoke test: seconds, numbers without meaning).

The Llama matches the library's model of that preset in width, depth, heads and MLP (SwiGLU of twice the width,
untied embeddings); the base RoPE model and TRA from scratch train at the preset's validated rates of the library's
``rope`` and ``tra`` kinds. Importing this module does not import transformers.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from types import SimpleNamespace

from ...training.config import TrainConfig
from ..methods import Method
from ..registry import experiment

CONTINUE_FRACTIONS = (0.10, 0.25)  # of the base's steps: each converted model's continued training
FACTORS = (1, 2, 4, 8, 16)  # evaluation lengths, in training lengths


@dataclass(frozen=True)
class RetrofitPreset:
    """A text budget for the experiment: the lm preset it takes its data, sizes and recipe from, the rates it
    trains at, and the continuation's schedule (a peak from ``continue_lrs``, chosen for each conversion and length on
    validation data, after ``continue_warmup`` steps)."""

    text_preset: str
    continue_lrs: tuple[float, ...]
    continue_warmup: int
    description: str

    def __post_init__(self):
        rates = tuple(self.continue_lrs)
        if not rates or len(set(rates)) != len(rates) or not all(isinstance(r, float) and r > 0 for r in rates):
            raise ValueError(f"RetrofitPreset.continue_lrs = {self.continue_lrs!r}; expected distinct positive rates")

    @property
    def text(self):
        """The language-model preset, read from the ``lm`` experiment's record."""
        return experiment("lm").presets[self.text_preset]

    @property
    def train(self) -> SimpleNamespace:
        """The lm preset's recipe (length, steps, batch, schedule, AdamW): its ``train`` fields over TrainConfig's
        defaults."""
        defaults = {f.name: f.default for f in dataclasses.fields(TrainConfig) if f.default is not dataclasses.MISSING}
        return SimpleNamespace(**{**defaults, **self.text.train})

    @property
    def task_args(self) -> dict:
        return dict(self.text.task_args)

    @property
    def eval_tokens(self) -> int:
        """The last tokens of the validation text scored at every length."""
        return self.text.eval_budget

    def split_validation(self, tokens):
        """(selection, scored): the validation text's last ``eval_tokens`` are scored at every length; the as many
        before them choose the continuations' rates, so no rate is chosen on the tokens the page reports."""
        span = self.eval_tokens
        if len(tokens) < 2 * span:
            raise ValueError(
                f"retrofit: {len(tokens)} validation tokens; expected at least 2 x {span} (selection, "
                "then the scored tokens)"
            )
        return tokens[-2 * span : -span], tokens[-span:]

    def rate(self, kind: str) -> float:
        """The lm preset's validated learning rate of the library's attention ``kind`` ('rope', 'tra')."""
        return self.text.rate_for(Method(kind), self.text_preset)

    def llama_sizes(self, vocab_size: int) -> dict:
        """LlamaConfig fields of the preset's model (max_position_embeddings: the training length)."""
        model = self.text.model
        return dict(
            vocab_size=vocab_size,
            hidden_size=model["d_model"],
            intermediate_size=2 * model["d_model"],
            num_hidden_layers=model["n_layers"],
            num_attention_heads=model["n_heads"],
            num_key_value_heads=model["n_heads"],
            max_position_embeddings=self.train.length,
            tie_word_embeddings=False,
        )

    def continue_steps(self, fraction: float) -> int:
        """Steps of a continuation of ``fraction`` of the base's budget (at least one)."""
        return max(1, round(fraction * self.train.steps))


PRESETS = {
    "cpu": RetrofitPreset(
        text_preset="cpu",
        continue_lrs=(3e-4, 1e-3, 3e-3, 1e-2),  # a tenth of the base's peak (3e-3) to three times it
        continue_warmup=10,
        description="the cpu text budget on Llama: byte-level Austen; 4 layers, d_model 128, 4 heads; 600 steps of "
        "32 x 128 tokens; evaluated on the last 65,536 Persuasion bytes at 1x-16x",
    ),
    "tiny": RetrofitPreset(
        text_preset="tiny",
        continue_lrs=(1e-3, 3e-3),
        continue_warmup=1,
        description="smoke test (1 layer, d_model 16, 16-byte windows, 6 steps; continuations of 1 and 2 steps): "
        "seconds, numbers without meaning",
    ),
}


def retrofit_preset(name: str) -> RetrofitPreset:
    """The preset ``name``, or a ValueError naming those there are."""
    if name not in PRESETS:
        raise ValueError(f"retrofit: preset = {name!r}; expected one of {sorted(PRESETS)}")
    return PRESETS[name]
