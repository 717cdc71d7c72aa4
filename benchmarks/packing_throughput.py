"""Training throughput on packed documents against padded ones: the same documents, the same model, one run.

    python benchmarks/packing_throughput.py [--methods tra fox] [--length 512] [--tokens 40000] [--repeats 3] \\
        [--out results/benchmarks/packing_cpu.md]

The documents are paragraphs of the byte-level ``austen`` training novels (split at blank lines; a seeded
sample of them, up to ``--tokens`` bytes in all): short, unequal texts, as a pretraining corpus of web
pages or a fine-tuning set is. One epoch over them trains (forward, backward, AdamW) in two layouts:

- padded: each document alone in its own row (one longer than ``--length`` in several), right-padded to
  the longest row of its batch with ``attention_mask`` (Hugging Face's ``padding="longest"``, in corpus order);
- packed: the documents end to end in rows of ``--length`` tokens, each token tagged with its document
  (``segment_ids``), so no token attends to another document (``tra train --task lm --pack``).

Tokens/s counts the documents' tokens (never padding) over the epoch's seconds, after one untimed step of
each layout. Layouts and methods alternate between repeats, so machine noise hits them alike; run it on an
otherwise idle core (``taskset -c N``). Each row of either layout predicts only next tokens of its own
document, so both train on the same text; a document split between packed rows (or a padded one longer
than a row) loses the context before the split.
"""

from __future__ import annotations

import argparse
import math
import re
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from cpu_builds import describe  # noqa: E402
from tra_attn import ModelConfig, TransformerLM  # noqa: E402
from tra_attn.data.text import benchmark_files, read_document, window_segments  # noqa: E402
from tra_attn.experiments.methods import method_from_text  # noqa: E402
from tra_attn.models import IGNORE_INDEX  # noqa: E402
from tra_attn.ops.varlen import PADDING  # noqa: E402
from tra_attn.utils.atomic import atomic_write_text  # noqa: E402
from tra_attn.utils.provenance import git_commit  # noqa: E402

LAYOUTS = ("packed", "padded")


def paragraphs(data_dir: str | None, tokens: int, seed: int) -> list[np.ndarray]:
    """A seeded sample of the Austen training paragraphs (byte ids), ``tokens`` bytes in all (the last one cut)."""
    texts = [read_document(path) for path in benchmark_files("austen", data_dir)["train"]]
    pieces = [p.strip() for text in texts for p in re.split(rb"\n\s*\n", text.replace(b"\r\n", b"\n"))]
    pieces = [p for p in pieces if p]
    documents, total = [], 0
    for index in np.random.default_rng(seed).permutation(len(pieces)):
        ids = np.frombuffer(pieces[index], dtype=np.uint8).astype(np.int64)[: tokens - total]
        if len(ids) >= 2:  # a document of one token has nothing to predict
            documents.append(ids)
            total += len(ids)
        if total >= tokens - 1:
            break
    return documents


def _next_token_labels(ids: torch.Tensor, same: torch.Tensor) -> torch.Tensor:
    """Labels of rows ``ids``: the next token where ``same`` (its position is of the same document), else ignored."""
    labels = torch.full_like(ids, IGNORE_INDEX)
    labels[:, :-1] = ids[:, 1:].masked_fill(~same, IGNORE_INDEX)
    return labels


def padded_batches(documents: list[np.ndarray], length: int, batch_size: int) -> list[dict]:
    """Each document alone in its row(s) of at most ``length`` tokens, batches right-padded to their longest row."""
    rows = [doc[i : i + length] for doc in documents for i in range(0, len(doc), length)]
    batches = []
    for first in range(0, len(rows), batch_size):
        group = rows[first : first + batch_size]
        width = max(len(row) for row in group)
        ids = torch.zeros(len(group), width, dtype=torch.int64)
        mask = torch.zeros(len(group), width, dtype=torch.int64)
        for r, row in enumerate(group):
            ids[r, : len(row)] = torch.from_numpy(row)
            mask[r, : len(row)] = 1
        labels = _next_token_labels(ids, (mask[:, 1:] == 1))
        batches.append({"input_ids": ids, "labels": labels, "attention_mask": mask})
    return batches


def packed_batches(documents: list[np.ndarray], length: int, batch_size: int) -> list[dict]:
    """The documents end to end in rows of ``length`` tokens (the last row right-padded), with ``segment_ids``:
    each token's document, numbered from 0 in each row, PADDING (-1) on padding."""
    stream = np.concatenate(documents)
    starts = np.concatenate([[0], np.cumsum([len(doc) for doc in documents[:-1]], dtype=np.int64)])
    n_rows = math.ceil(len(stream) / length)
    row_starts = np.arange(n_rows) * length
    segments = window_segments(starts, row_starts, length - 1)  # (rows, length): positions past the end too
    ids = torch.zeros(n_rows * length, dtype=torch.int64)
    ids[: len(stream)] = torch.from_numpy(stream)
    ids = ids.view(n_rows, length)
    real = (torch.arange(n_rows * length) < len(stream)).view(n_rows, length)
    segments = segments.masked_fill(~real, PADDING)
    labels = _next_token_labels(ids, (segments[:, 1:] == segments[:, :-1]) & real[:, 1:])
    return [
        {"input_ids": ids[i : i + batch_size], "labels": labels[i : i + batch_size], "segment_ids": s}
        for i, s in zip(range(0, n_rows, batch_size), segments.split(batch_size))
    ]


def layout_statistics(batches: list[dict]) -> dict:
    """Rows, steps, positions computed, and the share of them that are padding."""
    positions = sum(b["input_ids"].numel() for b in batches)
    real = sum(
        int((b["attention_mask"] == 1).sum()) if "attention_mask" in b else int((b["segment_ids"] >= 0).sum())
        for b in batches
    )
    return {
        "rows": sum(len(b["input_ids"]) for b in batches),
        "steps": len(batches),
        "positions": positions,
        "padding": 1 - real / positions,
    }


def make_model(method: str, args) -> TransformerLM:
    """A fresh model of ``method`` (a kind, or a kind with options: ``tra:local_window=4``), the same seed each
    time."""
    variant = method_from_text(method)
    d_model, n_layers, n_heads = args.model
    config = ModelConfig(
        vocab_size=256,
        d_model=d_model,
        n_layers=n_layers,
        n_heads=n_heads,
        dropout=0.0,
        block_style="prenorm",
        attention=variant.kind,
        attention_options={**({"max_pos": args.length} if variant.kind == "cope" else {}), **variant.options},
        **variant.model,
    )
    torch.manual_seed(0)
    return TransformerLM(config)


def train_step(model, optimizer, batch: dict) -> None:
    """One optimizer step on ``batch``: the mean loss over its scored tokens, backward, AdamW."""
    labels = batch["labels"]
    per_token = model(**batch)
    (per_token.sum() / max(int((labels != IGNORE_INDEX).sum()), 1)).backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)


def measure(method: str, batches: list[dict], real_tokens: int, args) -> float:
    """Tokens/s of one epoch over ``batches`` (after one untimed step) with a fresh model and AdamW."""
    model = make_model(method, args).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    train_step(model, optimizer, batches[0])
    start = time.perf_counter()
    for batch in batches:
        train_step(model, optimizer, batch)
    return real_tokens / (time.perf_counter() - start)


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument(
        "--methods",
        nargs="+",
        default=["tra", "fox"],
        help="kinds, or kinds with options (tra:local_window=4,keep_surrogate=1) (default: tra fox)",
    )
    parser.add_argument("--length", type=int, default=512, help="tokens per row (default: 512)")
    parser.add_argument("--batch-size", type=int, default=8, help="rows per step (default: 8)")
    parser.add_argument("--tokens", type=int, default=40_000, help="document tokens per epoch (default: 40000)")
    parser.add_argument(
        "--model",
        type=int,
        nargs=3,
        default=[128, 4, 4],
        metavar=("D_MODEL", "N_LAYERS", "N_HEADS"),
        help="model size (default: 128 4 4, the CPU language-model preset)",
    )
    parser.add_argument("--repeats", type=int, default=3, help="epochs per method and layout (default: 3)")
    parser.add_argument("--seed", type=int, default=0, help="which paragraphs (default: 0)")
    parser.add_argument("--data-dir", help="folder of your own austen_*.txt.gz files (default: the shipped novels)")
    parser.add_argument("--out", type=Path, help="write a Markdown page here (default: print only)")
    args = parser.parse_args(argv)
    for name in ("length", "batch_size", "tokens", "repeats"):
        if getattr(args, name) < (2 if name in ("length", "tokens") else 1):
            parser.error(f"--{name.replace('_', '-')} = {getattr(args, name)}; expected a larger positive integer")
    for method in args.methods:
        try:
            method_from_text(method)
        except ValueError as err:
            parser.error(f"--methods: {err}")
    return args


def report(args, argv: list[str], documents, stats: dict, results: dict) -> str:
    """The Markdown page: command, provenance, the documents, each layout's shape and the tokens/s table."""
    lengths = [len(doc) for doc in documents]
    d_model, n_layers, n_heads = args.model
    lines = [
        "# Packed against padded training throughput (cpu, fp32)",
        "",
        f"Command: `python {' '.join(['benchmarks/packing_throughput.py', *argv])}`  ",
        f"Machine: {describe(None, torch.get_num_threads())}  ",
        f"Code: commit {git_commit()}",
        "",
        f"Documents: {len(documents)} paragraphs of the byte-level Austen training novels (seed {args.seed}), "
        f"{sum(lengths):,} tokens; lengths median {statistics.median(lengths):.0f}, max {max(lengths)}. "
        f"Model: d_model {d_model}, {n_layers} layers, {n_heads} heads; rows of at most {args.length} tokens, "
        f"{args.batch_size} rows per step; one epoch per run (forward, backward, AdamW), {args.repeats} run(s) per "
        "method and layout, interleaved. Tokens/s: document tokens (no padding) per second, median over runs.",
        "",
        "| layout | rows | steps | positions computed | padding |",
        "|---|---|---|---|---|",
    ]
    for layout in LAYOUTS:
        s = stats[layout]
        lines.append(f"| {layout} | {s['rows']} | {s['steps']} | {s['positions']:,} | {s['padding']:.1%} |")
    lines += ["", "| method | packed tokens/s | padded tokens/s | packed / padded | runs (packed; padded) |"]
    lines.append("|---|---|---|---|---|")
    for method in args.methods:
        packed, padded = (results[(method, layout)] for layout in LAYOUTS)
        ratios = ", ".join(f"{a / b:.2f}" for a, b in zip(packed, padded))
        runs = f"{', '.join(f'{s:.0f}' for s in packed)}; {', '.join(f'{s:.0f}' for s in padded)}"
        cells = [method, f"{statistics.median(packed):.0f}", f"{statistics.median(padded):.0f}"]
        cells += [f"{statistics.median(packed) / statistics.median(padded):.2f}x (per run: {ratios})", runs]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> str:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    documents = paragraphs(args.data_dir, args.tokens, args.seed)
    real_tokens = sum(len(doc) for doc in documents)
    layouts = {
        "packed": packed_batches(documents, args.length, args.batch_size),
        "padded": padded_batches(documents, args.length, args.batch_size),
    }
    stats = {layout: layout_statistics(batches) for layout, batches in layouts.items()}
    results: dict[tuple[str, str], list[float]] = {}
    for repeat in range(args.repeats):
        methods = args.methods if repeat % 2 == 0 else args.methods[::-1]
        for i, method in enumerate(methods):
            for layout in LAYOUTS if (repeat + i) % 2 == 0 else LAYOUTS[::-1]:
                speed = measure(method, layouts[layout], real_tokens, args)
                results.setdefault((method, layout), []).append(speed)
                print(f"repeat {repeat} {method} {layout}: {speed:.0f} tokens/s", flush=True)
    text = report(args, argv, documents, stats, results)
    print(text)
    if args.out:
        atomic_write_text(args.out, text)
    return text


if __name__ == "__main__":
    main()
