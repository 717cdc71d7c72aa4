"""The retrofit page: where and how it was made, what every row is, the table of bits per byte at 1x-16x the
training length and its plot (``bits_per_byte.png``), each written atomically."""

from __future__ import annotations

import datetime
import platform
from pathlib import Path

import torch

from ...utils.atomic import atomic_write_text
from ...utils.provenance import cpu_name, git_commit
from ..pages.plots import pyplot, save_figure
from .plan import Row, base_recipe, chosen_rate, continue_recipe
from .presets import CONTINUE_FRACTIONS, FACTORS, RetrofitPreset

TITLE = "Retrofitting: does a short uptraining give a RoPE model TRA's extrapolation?"
PLOT_NAME = "bits_per_byte.png"


def machine_line() -> str:
    import transformers

    return (
        f"Machine: {cpu_name()}, {torch.get_num_threads()} CPU thread(s); torch {torch.__version__}, transformers "
        f"{transformers.__version__}, Python {platform.python_version()}"
    )


def counted(n: int, word: str) -> str:
    """'1 step', '2 steps'."""
    return f"{n} {word}{'' if n == 1 else 's'}"


def setup_lines(preset: RetrofitPreset, seed: int) -> list[str]:
    """What every row is, from the preset's own values."""
    base, sizes = base_recipe(preset, seed), preset.llama_sizes(256)
    steps = [preset.continue_steps(f) for f in CONTINUE_FRACTIONS]
    more = continue_recipe(preset, seed, steps[0], preset.continue_lrs[0])
    rates = ", ".join(f"{lr:g}" for lr in preset.continue_lrs)
    shares = " and ".join(f"{round(100 * f)}%" for f in CONTINUE_FRACTIONS)
    scored = f"the last {preset.eval_tokens:,} tokens"
    layers, heads = counted(sizes["num_hidden_layers"], "layer"), counted(sizes["num_attention_heads"], "head")
    warmup, rewarm = counted(base.warmup_steps, "warm-up step"), counted(more.warmup_steps, "step")
    return [
        f"The base is transformers' own `LlamaForCausalLM` from a `LlamaConfig` ({layers}, hidden size "
        f"{sizes['hidden_size']}, {heads}, SwiGLU of {sizes['intermediate_size']}, RoPE theta 10000, untied "
        f"embeddings), trained on byte-level Austen (five novels) for {base.steps} steps of {base.batch_size} x "
        f"{base.length} tokens: AdamW (weight decay {base.weight_decay:g}, no decay on 1-d parameters), {warmup} to "
        f"{base.lr:g} (the text preset's rate for RoPE), cosine to {base.min_lr_ratio:g} of it, gradients clipped at "
        f"{base.grad_clip:g}.",
        "",
        "- **RoPE + linear, dynamic NTK, YaRN**: the base with transformers' inference-time scaling "
        '(`config.rope_parameters = {"rope_type": ..., "factor": f}`), no training, at f = evaluation length / '
        "training length (the factor that targets that length: at 1x each is the base).",
        f"- **TRA, FoX, ALiBi, +{shares}**: the base converted by `tra_attn.hf.add_attention` (TRA with RoPE kept and "
        "removed, and TRA's recommended configuration, `local_window=4, keep_surrogate=1.0`, with RoPE kept; FoX and "
        "ALiBi with RoPE removed; otherwise default settings, fresh gates), then trained "
        f"{' and '.join(map(str, steps))} steps more ({shares} of the base's budget) on the batches after the "
        f"base's: a fresh warm-up of {rewarm} to a peak, cosine to {more.min_lr_ratio:g} of it over the "
        f"continuation's own steps. The peak is chosen for each conversion and length from {rates} on validation "
        f"bits per byte at the training length over the {preset.eval_tokens:,} Persuasion tokens before the scored "
        "ones (the table below the plot); a tie goes to the smaller rate.",
        "- **TRA from scratch**: the base's fresh Llama (the same initial weights and batches) with "
        f'`add_tra(rope="remove")`, trained like the base at {preset.rate("tra"):g} (the text preset\'s rate for '
        "TRA).",
        "",
        f"Evaluation: bits per byte in non-overlapping windows of 1x-{FACTORS[-1]}x the training length over {scored} "
        "of Persuasion, the same tokens at every length.",
    ]


def table_lines(rows: list[Row], values: dict, infos: dict, length: int) -> list[str]:
    header = ["model", "training steps", "peak lr", *(f"{f}x ({f * length})" for f in FACTORS)]
    header += [f"{FACTORS[-1]}x / 1x", "train minutes"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        bpb = values[row.label]
        steps = f"{row.base_steps} + {row.steps}" if row.base_steps else str(row.steps)
        minutes = "" if row.scaling else f"{infos[row.label]['train_seconds'] / 60:.1f}"
        lr = "" if row.lr is None else f"{row.lr:g}"
        ratio = f"{bpb[FACTORS[-1]] / bpb[1]:.3f}"
        cells = [row.label, steps, lr, *(f"{bpb[f]:.3f}" for f in FACTORS), ratio, minutes]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def sweep_lines(sweep: dict[str, dict[float, float]]) -> list[str]:
    """The continuations' rates: selection bits per byte at each, and the one chosen."""
    rates = sorted({lr for values in sweep.values() for lr in values})
    header = ["continuation", *(f"lr {lr:g}" for lr in rates), "chosen"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, values in sweep.items():
        cells = [f"{values[lr]:.3f}" if lr in values else "n/a" for lr in rates]
        lines.append("| " + " | ".join([label, *cells, f"{chosen_rate(values):g}"]) + " |")
    return lines


def page_text(preset_name: str, preset, seed: int, rows, values, infos, sweep, command: str) -> str:
    length = preset.train.length
    lines = [
        f"# {TITLE}",
        "",
        f"Command: `{command}`  ",
        machine_line() + "  ",
        f"Date: {datetime.date.today().isoformat()}, commit {git_commit()}  ",
        f"Preset: {preset_name}: {preset.description}  ",
        f"Seed: {seed} (one seed: one training of each model, so a difference between two rows smaller than the "
        "spread over seeds on the same budget, results/text, is no evidence)",
        "",
        *setup_lines(preset, seed),
        "",
        "## Bits per byte",
        "",
        *table_lines(rows, values, infos, length),
        "",
        f"Training steps: the base's, + the continuation's. {FACTORS[-1]}x / 1x below 1: the model gains from the "
        "longer context. Train minutes: the stage's own training (the scaled rows are the base, untrained).",
        "",
        f"![bits per byte against evaluation length]({PLOT_NAME})",
        "",
        "## Continuation rates",
        "",
        f"Validation bits per byte at the training length on the {preset.eval_tokens:,} Persuasion tokens before the "
        "scored ones, after each continuation at each peak rate; the rows above use the chosen one.",
        "",
        *sweep_lines(sweep),
        "",
        "Every trained model is a safetensors checkpoint in the cache (`--cache`); a rerun reuses finished stages and "
        "evaluations.",
    ]
    return "\n".join(lines) + "\n"


COLOURS = {  # by the label's start, the first that matches
    "RoPE + linear": "#9467bd", "RoPE + dynamic NTK": "#8c564b", "RoPE + YaRN": "#e377c2", "RoPE": "#7f7f7f",
    "TRA, RoPE kept": "#ff7f0e", "TRA (local_window=4, keep_surrogate=1), RoPE kept": "#bcbd22",
    "TRA, RoPE removed": "#d62728", "FoX": "#1f77b4", "ALiBi": "#2ca02c",
    "TRA from scratch": "#000000",
}  # fmt: skip


def style(label: str) -> dict:
    """Colour by family; dashed for the shorter continuation and the scalings, crosses for the scalings."""
    colour = next(c for name, c in COLOURS.items() if label.startswith(name))
    scaled = label.startswith("RoPE +")
    short = scaled or f"+{round(100 * CONTINUE_FRACTIONS[0])}%" in label
    return {"color": colour, "linestyle": "--" if short else "-", "marker": "x" if scaled else "o"}


def plot(rows: list[Row], values: dict, length: int, path: Path) -> None:
    """Bits per byte against evaluation length, one line per row."""
    plt = pyplot()
    fig, axis = plt.subplots(figsize=(11, 5))
    lengths = [f * length for f in FACTORS]
    for row in rows:
        axis.plot(lengths, [values[row.label][f] for f in FACTORS], label=row.label, **style(row.label))
    axis.axvline(length, color="k", linestyle=":", linewidth=1)
    axis.set_xscale("log", base=2)
    axis.set_xlabel("evaluation length (tokens); dotted: training length")
    axis.set_ylabel("bits per byte")
    axis.set_title("Bits per byte against evaluation length")
    axis.legend(fontsize=8, frameon=False, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    save_figure(fig, path, dpi=110)


def write_page(out: Path, text: str, rows: list[Row], values: dict, length: int) -> Path:
    """``out/README.md`` and its plot, each written atomically; the page's path."""
    plot(rows, values, length, out / PLOT_NAME)
    atomic_write_text(out / "README.md", text)
    return out / "README.md"
