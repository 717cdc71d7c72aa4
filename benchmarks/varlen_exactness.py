"""Padded and packed batches against each document run alone: the largest differences, tabulated.

    python benchmarks/varlen_exactness.py [--kinds ...] [--lengths 37 1 13 61] [--new-tokens 8] \\
        [--op-lengths 37 1 13 61 29] [--no-triton] [--out results/benchmarks/varlen_exactness_cpu.md]

Model: a tiny random fp32 model per registered attention kind (default: all) and TRA's window and dense-head
variants; logits and per-token losses in four layouts (left padding, right padding, one packed row, two
packed rows) and greedy KV-cache generation from left-padded prompts. Op: ``threshold_relative_attention``'s
fp64 naive, chunked and split-KV paths, and fp32 Triton when triton runs (the interpreter without a GPU).
Each table's first row is the bar the tests assert; a layout a kind refuses is a "not run" cell with its
reason. The page links to ``<out>_notes.md``, the hand-written discussion of its figures.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import math
import os
import sys
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path

import torch
import torch.nn.functional as F

if not torch.cuda.is_available():  # the Triton kernels run through the interpreter: set before triton is imported
    os.environ.setdefault("TRITON_INTERPRET", "1")

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from cpu_builds import describe as describe_machine  # noqa: E402
from tra_attn import ATTENTION_KINDS, ModelConfig, TransformerLM, threshold_relative_attention  # noqa: E402
from tra_attn.layers.norms import rms_normalize  # noqa: E402
from tra_attn.ops.tra.chunked import chunked_forward_stats  # noqa: E402
from tra_attn.ops.tra.contract import Documents, KeepRule  # noqa: E402
from tra_attn.ops.tra.dispatch import triton_interpreted  # noqa: E402
from tra_attn.ops.tra.split_kv import split_kv_attention  # noqa: E402
from tra_attn.ops.varlen import PADDING  # noqa: E402
from tra_attn.utils.atomic import atomic_write_text  # noqa: E402
from tra_attn.utils.provenance import git_commit  # noqa: E402

MODEL_BAR = 1e-5  # tests/models/test_padding_and_packing.py: atol = rtol = 1e-5 (here without the relative part)
FP64_BAR = 1e-12  # tests/ops/test_tra_varlen.py: 1e-12 x max(1, max |reference|) (here without the scaling)
TRITON_BAR = 3e-5  # tests/ops/test_tra_varlen.py, fp32 Triton: 3e-5 x max(1, max |reference|) (here unscaled)
VARIANTS = {  # TRA's ablations, and TRA with the keep rule's windows and dense heads (experiments/methods.py, README)
    "tra_gate=key": {"gate": "key"},
    "tra_threshold=-inf": {"threshold": float("-inf")},
    "tra_distance=false": {"distance": False},
    "tra_local_window=4": {"local_window": 4},
    "tra_dense_heads=2": {"dense_heads": 2},
    "tra_dense_heads=2, tra_dense_window=16": {"dense_heads": 2, "dense_window": 16},
}
KEEP_RULES = {"threshold 0": {}, "local 3, sliding 20": {"local_window": 3, "sliding_window": 20}}
GRADIENTS = ("out", "dq", "dk", "dv", "dgate")
CONTROL = "control: (c) without boundaries"
REFUSED = (ValueError, NotImplementedError, RuntimeError)  # how a kind refuses a layout: a "not run" cell
REFERENCE = "max \\|reference\\|"  # a column of the magnitudes the figures are differences of


@dataclass
class Layout:
    """Documents placed in rows: ``seg`` (B, W) segment ids (PADDING on padding), ``places`` (row, start, doc)."""

    name: str
    form: str  # how the model and the op are told: attention_mask, cu_seqlens or segment_ids
    seg: torch.Tensor
    places: list[tuple[int, int, int]]


def layouts(lengths: list[int]) -> list[Layout]:
    """(a) one document per row, left padded; (b) right padded; (c) all in one row; (d) two rows of documents
    (even and odd ones), the first left padded, the second right padded."""

    def place(name, form, rows, sides):
        widths = [sum(lengths[d] for d in docs) for docs in rows]
        seg = torch.full((len(rows), max(widths)), PADDING, dtype=torch.int32)
        places = []
        for r, (docs, side) in enumerate(zip(rows, sides)):
            start = seg.shape[1] - widths[r] if side == "left" else 0
            for d in docs:
                seg[r, start : start + lengths[d]] = d
                places.append((r, start, d))
                start += lengths[d]
        return Layout(name, form, seg, places)

    n = len(lengths)
    singles = [[d] for d in range(n)]
    return [
        place("(a) left padding", "attention_mask", singles, ["left"] * n),
        place("(b) right padding", "attention_mask", singles, ["right"] * n),
        place("(c) packed, one row", "cu_seqlens", [list(range(n))], ["left"]),
        place("(d) two packed rows", "segment_ids", [list(range(0, n, 2)), list(range(1, n, 2))], ["left", "right"]),
    ]


def describe(layout: Layout, lengths: list[int], mask_name: str) -> dict:
    """The keyword argument that tells the model (mask_name 'attention_mask') or the op ('key_padding_mask')."""
    if layout.form == "attention_mask":
        return {mask_name: (layout.seg >= 0).long()}
    if layout.form == "cu_seqlens":
        return {"cu_seqlens": torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)}
    return {"segment_ids": layout.seg}


def fill(layout: Layout, pieces: list[torch.Tensor], padding) -> torch.Tensor:
    """A (B, W) tensor of the documents' ``pieces`` at their places, ``padding`` elsewhere."""
    out = torch.full(layout.seg.shape, padding, dtype=pieces[0].dtype)
    for row, start, doc in layout.places:
        out[row, start : start + len(pieces[doc])] = pieces[doc]
    return out


def largest(differences) -> float:
    return max((float(d.abs().max()) if d.numel() else 0.0) for d in differences)


@dataclass
class Table:
    """A Markdown table whose first row holds each measured column's bar (None: not a measured column).

    A measured cell may be an exception instead of a figure (the kind refused that layout): it is written
    "not run (n)", and reason n is listed under the table."""

    title: str
    note: str
    header: list[str]
    bars: list[float | None]
    rows: list[list] = field(default_factory=list)
    reasons: list[str] = field(default_factory=list)

    def add(self, label: str, cells: list) -> None:
        """A row: ``label`` and its cells, an exception becoming a "not run" cell."""
        self.rows.append([label, *[self.not_run(c) if isinstance(c, BaseException) else c for c in cells]])

    def not_run(self, err: BaseException) -> str:
        reason = " ".join(f"{type(err).__name__}: {err}".split()).replace("|", "\\|")
        if reason not in self.reasons:
            self.reasons.append(reason)
        return f"not run ({self.reasons.index(reason) + 1})"

    def markdown(self) -> list[str]:
        bar_row = ["**bar**" if i == 0 else ("" if b is None else _number(b)) for i, b in enumerate(self.bars)]
        lines = [f"### {self.title}", "", self.note, "", "| " + " | ".join(self.header) + " |"]
        lines.append("|" + "---|" * len(self.header))
        for row in [bar_row, *[[c if isinstance(c, str) else _number(c) for c in row] for row in self.rows]]:
            lines.append("| " + " | ".join(row) + " |")
        if self.reasons:
            lines += ["", "Not run:", ""] + [f"{n}. {reason}" for n, reason in enumerate(self.reasons, 1)]
        return lines + [""]

    def figures(self, counts: bool = False) -> list[tuple[float, float, list]]:
        """(figure, bar, row) of every measured float figure (``counts``: of the counts, whose bar is 0)."""
        return [
            (row[i], bar, row)
            for row in self.rows
            for i, bar in enumerate(self.bars)
            if bar is not None and not isinstance(row[i], str) and (bar == 0) == counts
        ]

    def ulps(self) -> float | None:
        """The largest figure in units of the fp32 spacing at its row's largest |reference| (None: no such column)."""
        if self.header[-1] != REFERENCE:
            return None
        figures = [(f, row[-1]) for f, _, row in self.figures() if not isinstance(row[-1], str)]
        return max((f / 2.0 ** (math.floor(math.log2(ref)) - 23) for f, ref in figures), default=None)

    def worst(self) -> float:
        """The largest measured figure relative to its bar (the counts, whose bar is 0, left out)."""
        return max((f / bar for f, bar, _ in self.figures()), default=0.0)

    def not_run_cells(self) -> int:
        return sum(isinstance(c, str) and c.startswith("not run") for row in self.rows for c in row)


def _number(x) -> str:
    return str(x) if isinstance(x, int) else "0" if x == 0 else f"{x:.1e}"


def tiny_model(kind: str, options: dict) -> TransformerLM:
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=64, d_model=32, n_layers=2, n_heads=4, attention=kind, attention_options=options)
    return TransformerLM(config).eval()


def attempt(fn, *args):
    """``fn(*args)``, or the exception with which the model refused them (REFUSED)."""
    try:
        return fn(*args)
    except REFUSED as err:
        return err


@torch.no_grad()
def measure_layout(model, layout: Layout, docs, labels, alone, alone_loss) -> tuple[float, float]:
    """The largest logit and loss differences of the documents placed by ``layout`` against each alone."""
    lengths = [len(x) for x in docs]
    ids, targets = fill(layout, docs, 0), fill(layout, labels, -100)
    kwargs = describe(layout, lengths, "attention_mask")
    logits, loss = model(ids, **kwargs), model(ids, labels=targets, **kwargs)
    width = ids.shape[1]
    logit_d, loss_d = [], [loss[layout.seg < 0]]  # padding is never scored: its loss is 0
    for row, start, doc in layout.places:
        span = slice(start, start + lengths[doc])
        logit_d.append(logits[row, span] - alone[doc])
        expected = alone_loss[doc].clone()
        if span.stop < width:  # the last target is the next document's first token, or padding: unscored
            expected[-1] = 0
        loss_d.append(loss[row, span] - expected)
    return largest(logit_d), largest(loss_d)


@torch.no_grad()
def measure_model(kind: str, options: dict, lengths: list[int], new_tokens: int) -> tuple[list, list, list]:
    """Cells of the three model tables: logit differences per layout, the control and the logits' magnitude;
    loss differences per layout and the losses' magnitude; generation (``measure_generation``). A cell is the
    exception instead where the model refused the layout."""
    model = tiny_model(kind, options)
    gen = torch.Generator().manual_seed(1)
    docs = [torch.randint(0, 64, (n,), generator=gen) for n in lengths]
    labels = [torch.randint(0, 64, (n,), generator=gen) for n in lengths]
    alone = [model(x[None])[0] for x in docs]
    alone_loss = [model(x[None], labels=y[None])[0] for x, y in zip(docs, labels)]
    logit_diffs, loss_diffs = [], []
    for layout in layouts(lengths):
        got = attempt(measure_layout, model, layout, docs, labels, alone, alone_loss)
        logit_diffs.append(got if isinstance(got, Exception) else got[0])
        loss_diffs.append(got if isinstance(got, Exception) else got[1])
    packed = layouts(lengths)[2]  # the control: the packed row without its boundaries, documents see earlier ones
    leaked = model(fill(packed, docs, 0))[0]
    logit_diffs.append(largest([leaked[start : start + lengths[d]] - alone[d] for _, start, d in packed.places]))
    logit_diffs.append(largest(alone))  # the magnitudes the differences are rounding errors of
    loss_diffs.append(largest(alone_loss))
    generated = attempt(measure_generation, model, docs, new_tokens)
    return logit_diffs, loss_diffs, [generated] * 3 if isinstance(generated, Exception) else generated


@torch.no_grad()
def measure_generation(model: TransformerLM, prompts: list[torch.Tensor], new_tokens: int) -> list:
    """Greedy decoding of the left-padded prompts with the KV cache against each prompt alone: tokens that
    differ, the largest logit difference of the decoding steps (cached batch against the tokens alone), and
    those logits' magnitude. The output layer is scaled by 20 first, as the tests do."""
    model.lm_head.weight.mul_(20)
    lengths = [len(p) for p in prompts]
    left = layouts(lengths)[0]
    batch, mask = fill(left, prompts, 5), (left.seg >= 0).long()
    width = batch.shape[1]
    out = model.generate(batch, new_tokens, temperature=0, attention_mask=mask)
    mismatches = 0
    for i, prompt in enumerate(prompts):
        alone = model.generate(prompt[None], new_tokens, temperature=0)[0]
        mismatches += int((out[i, width - len(prompt) :] != alone).sum())
    cache = model.new_cache()
    steps = [model(batch, cache=cache, attention_mask=mask)[:, -1]]
    steps += [model(out[:, t : t + 1], cache=cache)[:, -1] for t in range(width, out.shape[1] - 1)]
    alone = [model(out[i : i + 1, width - n :])[0, n - 1 : -1] for i, n in enumerate(lengths)]
    diffs = [torch.stack([step[i] for step in steps]) - alone[i] for i in range(len(prompts))]
    return [mismatches, largest(diffs), largest(alone)]


def op_inputs(seg: torch.Tensor, heads: int = 2, dim: int = 16, seed: int = 0):
    """RMS-normalised q, k (as the TRA layer feeds the op), random v, a logsigmoid gate and an output gradient,
    fp64, (B, H, W, D); one query position is zero: with threshold 0 it keeps no key."""
    b, w = seg.shape
    gen = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(b, heads, w, dim, generator=gen, dtype=torch.float64) for _ in range(3))
    q, k = rms_normalize(q, 1e-6), rms_normalize(k, 1e-6)
    q[:, :, w // 3] = 0
    gate = F.logsigmoid(2 * torch.randn(b, heads, w, generator=gen, dtype=torch.float64) - 1)
    grad_out = torch.randn(b, heads, w, dim, generator=gen, dtype=torch.float64)
    return [q, k, v, gate], grad_out


def output_and_grads(fn, inputs, grad_out) -> list[torch.Tensor]:
    inputs = [t.detach().clone().requires_grad_() for t in inputs]
    out = fn(*inputs)
    return [out.detach(), *torch.autograd.grad(out, inputs, grad_out)]


def spans(seg: torch.Tensor):
    """(row, start, end) of every document of every row (contiguous ids)."""
    for row in range(seg.shape[0]):
        ids = seg[row]
        for doc in ids[ids >= 0].unique().tolist():
            where = (ids == doc).nonzero().flatten()
            yield row, int(where[0]), int(where[-1]) + 1


def per_document(fn, inputs, grad_out, seg) -> list[torch.Tensor]:
    """Output and gradients of ``fn`` run on each document alone, stitched; zeros at padding."""
    result = [torch.zeros_like(t) for t in (inputs[0], *inputs)]
    for row, a, e in spans(seg):
        part = [t[row : row + 1, :, a:e] for t in inputs]
        got = output_and_grads(fn, part, grad_out[row : row + 1, :, a:e])
        for target, value in zip(result, got):
            target[row, :, a:e] = value[0]
    return result


def naive(rule: dict):
    return lambda *x: threshold_relative_attention(*(t.double() for t in x), impl="naive", **rule)


def last_query_alone(inputs, seg, rule: dict) -> torch.Tensor:
    """fp64 naive output of each row's last query run with its own document's keys only (0 for padding)."""
    q, k, v, gate = inputs
    want = torch.zeros_like(q[:, :, -1:])
    for row, a, e in spans(seg):
        if e == seg.shape[1]:  # the row's last position is in this document
            one = (
                q[row : row + 1, :, -1:],
                k[row : row + 1, :, a:e],
                v[row : row + 1, :, a:e],
                gate[row : row + 1, :, -1:],
            )
            want[row] = naive(rule)(*one)[0]
    return want


def measure_op(lengths: list[int], triton: bool) -> list[Table]:
    """Each implementation's forward and gradients on each layout, and split-KV decoding of each row's last
    query, against fp64 naive on each document alone: fp64 naive and chunked, and fp32 Triton if ``triton``."""
    header = ["path", "layout", "keep rule", *GRADIENTS]
    note = (
        "max |difference| of the output and each gradient against fp64 naive run on each document alone "
        "(padding positions against 0). Split-KV decoding: each row's last query against all W keys in 4 splits "
        "(`split_kv_attention`), forward only."
    )
    fp64 = Table("Op, fp64: naive, chunked, split-KV decoding", note, header, [None] * 3 + [FP64_BAR] * 5)
    fp32_note = note + " Baseline rows: each document run alone through Triton, without documents."
    fp32 = Table("Op, fp32 Triton (interpreter)", fp32_note, header, [None] * 3 + [TRITON_BAR] * 5)
    paths = [("naive", fp64, torch.float64), ("chunked", fp64, torch.float64)]
    decoders = [("split-KV, chunked statistics", chunked_forward_stats, fp64, torch.float64)]
    if triton:
        from tra_attn.ops.tra.triton_op import forward_stats

        paths.append(("triton", fp32, torch.float32))
        decoders.append(("split-KV, Triton statistics", forward_stats, fp32, torch.float32))
    for layout in layouts(lengths):
        inputs, grad_out = op_inputs(layout.seg)
        documents = describe(layout, lengths, "key_padding_mask")
        for rule_name, rule in KEEP_RULES.items():
            label = [layout.name, rule_name]
            expected = per_document(naive(rule), inputs, grad_out, layout.seg)
            for impl, table, dtype in paths:

                def run(*x, impl=impl, rule=rule, documents=documents):
                    return threshold_relative_attention(*x, impl=impl, **rule, **documents)

                got = output_and_grads(run, [t.to(dtype) for t in inputs], grad_out.to(dtype))
                table.rows.append([impl, *label, *[largest([a.double() - e]) for a, e in zip(got, expected)]])
            if triton:  # the baseline: Triton's fp32 error on each document alone, without documents

                def alone(*x, rule=rule):
                    return threshold_relative_attention(*x, impl="triton", **rule)

                got = per_document(alone, [t.float() for t in inputs], grad_out.float(), layout.seg)
                row = [largest([a.double() - e]) for a, e in zip(got, expected)]
                fp32.rows.append(["triton, each document alone (baseline)", *label, *row])
            want = last_query_alone(inputs, layout.seg, rule)
            keep = KeepRule(local_window=rule.get("local_window", 0), sliding_window=rule.get("sliding_window", 0))
            contract = {"scale": 16**-0.5, "keep": keep, "documents": Documents(layout.seg)}
            for name, stats, table, dtype in decoders:
                last = [t[:, :, -1:] if i in (0, 3) else t for i, t in enumerate(inputs)]
                got = split_kv_attention(*(t.to(dtype) for t in last), **contract, n_splits=4, forward_stats=stats)
                table.rows.append([name, *label, largest([got.double() - want]), *["-"] * 4])
    return [fp64, fp32] if triton else [fp64]


def cases(kinds: list[str]) -> list[tuple[str, str, dict]]:
    """(label, kind, attention options): every kind asked for, and TRA's variants when TRA is asked for."""
    rows = [(kind, kind, {}) for kind in kinds]
    return rows + [(f"tra, {name}", "tra", options) for name, options in VARIANTS.items() if "tra" in kinds]


def measure_models(args) -> list[Table]:
    names = [layout.name for layout in layouts(args.lengths)]
    logits = Table(
        "Model: logits (a-d)",
        "max |difference| between each document's logits in the batch and the document run alone. Control (not "
        "a bar): the packed row of (c) without `cu_seqlens`, so that each document attends to the ones before it.",
        ["kind", *names, CONTROL, REFERENCE],
        [None, *[MODEL_BAR] * 4, None, None],
    )
    loss = Table(
        "Model: per-token loss with labels (e)",
        "max |difference| of the per-token losses against the document alone, whose last target is unscored "
        "(loss 0) unless the document ends its row; padding positions against 0.",
        ["kind", *names, REFERENCE],
        [None, *[MODEL_BAR] * 4, None],
    )
    generation = Table(
        "Model: greedy generation from left-padded prompts with the KV cache (f)",
        f"The documents as prompts, left padded, {args.new_tokens} new tokens each, against each prompt "
        "generated alone (the output layer scaled by 20 first, as in the tests). Logits: every decoding step of "
        "the cached batch against a forward of the same tokens alone.",
        ["kind", "mismatching tokens", "max \\|difference\\| of step logits", REFERENCE],
        [None, 0, MODEL_BAR, None],
    )
    for label, kind, options in cases(args.kinds):
        start = time.perf_counter()
        cells = attempt(measure_model, kind, options, args.lengths, args.new_tokens)
        if isinstance(cells, Exception):  # the kind runs no document at all here
            cells = [[cells] * (len(table.header) - 1) for table in (logits, loss, generation)]
        for table, row in zip((logits, loss, generation), cells):
            table.add(label, row)
        print(f"{label}: {time.perf_counter() - start:.1f} s", flush=True)
    return [logits, loss, generation]


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kinds", nargs="+", default=list(ATTENTION_KINDS), help="attention kinds (default: all)")
    parser.add_argument("--lengths", type=int, nargs="+", default=[37, 1, 13, 61], help="model documents' lengths")
    parser.add_argument("--new-tokens", type=int, default=8, help="tokens generated per prompt (default: 8)")
    parser.add_argument("--op-lengths", type=int, nargs="+", default=[37, 1, 13, 61, 29], help="op documents")
    parser.add_argument("--no-triton", action="store_true", help="skip Triton even if it can run")
    parser.add_argument("--out", type=Path, help="write a Markdown page here (default: print only)")
    args = parser.parse_args(argv)
    for kind in args.kinds:
        if kind not in ATTENTION_KINDS:
            parser.error(f"--kinds: {kind!r}; expected one of {list(ATTENTION_KINDS)}")
    for name in ("lengths", "op_lengths"):
        if len(getattr(args, name)) < 2 or min(getattr(args, name)) < 1:
            parser.error(f"--{name.replace('_', '-')} = {getattr(args, name)}; expected two or more positive lengths")
    if args.new_tokens < 1:
        parser.error(f"--new-tokens = {args.new_tokens}; expected a positive integer")
    return args


def triton_runs() -> bool:
    return torch.cuda.is_available() or triton_interpreted()


def machine() -> str:
    """The GPU if any, the CPU (model, family, instruction sets), the kernels' build, the threads, and the versions
    the figures depend on."""
    device = f"{torch.cuda.get_device_name()}; " if torch.cuda.is_available() else ""
    triton = importlib.util.find_spec("triton")
    return (
        f"{device}{describe_machine(None, torch.get_num_threads())}; "
        f"{'triton ' + importlib.metadata.version('triton') if triton else 'no triton'}"
    )


def summary(tables: list[Table]) -> Table:
    """One row per table: its largest figure against its bar, how many figures are 0, the cells not run, the
    mismatching tokens, and (model tables) the largest figure in units of the fp32 spacing of its row's largest
    |reference|."""
    header = ["table", "largest figure / its bar", "figures", "of them 0", "not run", "mismatching tokens"]
    result = Table(
        "Summary",
        "Every table above in one row each. Units in the last place: a figure divided by the spacing of fp32 "
        "numbers at its row's max |reference|.",
        [*header, "largest, fp32 units in the last place"],
        [None, 1, None, None, None, 0, None],
    )
    for table in tables:
        figures, counts = table.figures(), table.figures(counts=True)
        ulps = table.ulps()
        result.rows.append(
            [
                table.title,
                table.worst(),
                str(len(figures)),
                str(sum(f == 0 for f, _, _ in figures)),
                str(table.not_run_cells()),
                sum(f for f, _, _ in counts) if counts else "-",
                "-" if ulps is None else f"{ulps:.1f}",
            ]
        )
    return result


def report(args, argv: list[str], model_tables: list[Table], op_tables: list[Table], seconds: float) -> str:
    """The Markdown page: command, provenance, a link to its notes, what is measured, and the tables."""
    lines = [
        "# Padded and packed batches against each document alone (cpu)",
        "",
        f"Command: `python {' '.join(['benchmarks/varlen_exactness.py', *argv])}`  ",
        f"Machine: {machine()}  ",
        f"Date: {datetime.now(timezone.utc):%Y-%m-%d}, commit {git_commit()}; {seconds:.0f} s",
    ]
    if args.out:
        notes = f"{args.out.stem}_notes.md"
        lines[-1] += "  "
        lines.append(f"Notes: [{notes}]({notes}), the hand-written discussion of these figures")
    lines += [
        "",
        "Each figure is the largest |difference| between what a document computes inside a padded or packed "
        "batch and what it computes run alone; 0 is bit for bit. Model (fp32, CPU): a random model per kind "
        "(seed 0; 2 layers, d_model 32, 4 heads, vocabulary 64, eval mode) on documents of lengths "
        f"{args.lengths} with random tokens and labels, in four layouts: (a) one document per row, left padded, "
        "and (b) right padded, with `attention_mask`; (c) all documents in one row with `cu_seqlens`; (d) two "
        "rows of packed documents, the even-numbered ones left padded and the odd ones right padded, with "
        "`segment_ids`; (e) the per-token loss in the same layouts; (f) greedy generation with the KV cache from "
        "the left-padded documents. Op (`threshold_relative_attention`): (B, H = 2, W, D = 16) inputs with "
        f"documents of lengths {args.op_lengths} in the same four layouts, under two keep rules; each path's "
        "output and gradients against fp64 naive run on each document alone. The first row of each table is the "
        "bar the tests assert (tests/models/test_padding_and_packing.py, tests/ops/test_tra_varlen.py), as an absolute "
        'bound on every figure of its column; a layout a kind refused is a "not run" cell, its reason listed '
        "under the table.",
        "",
        "## Model (fp32)",
        "",
    ]
    for table in model_tables:
        lines += table.markdown()
    lines += ["## Op (`threshold_relative_attention`)", ""]
    if not op_tables[-1].title.startswith("Op, fp32"):
        lines += ["fp32 Triton was not run here (no GPU and no interpreter, or `--no-triton`).", ""]
    for table in op_tables:
        lines += table.markdown()
    lines += summary(model_tables + op_tables).markdown()
    return "\n".join(lines)


def main(argv=None) -> str:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parse_args(argv)
    start = time.perf_counter()
    model_tables = measure_models(args)
    op_tables = measure_op(args.op_lengths, triton=triton_runs() and not args.no_triton)
    text = report(args, argv, model_tables, op_tables, time.perf_counter() - start)
    print(text)
    if args.out:
        atomic_write_text(args.out, text)
    return text


if __name__ == "__main__":
    main()
