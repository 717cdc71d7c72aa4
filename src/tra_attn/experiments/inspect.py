"""``tra inspect``: what trained TRA models keep, per layer and head, at several lengths.

For each checkpoint and length (a multiple of its training length, or the sequences of a data file) it runs
the model in fp64 on fresh test sequences and measures, over the queries whose next token is scored: the
fraction of causal keys kept, how many keys are kept (the count c_i0), how often a query keeps none, the
attention mass on keys only the local window keeps, and, for a task that names the roles of its keys
(``Task.key_roles``: relevant, distractor, filler...), the kept rate of and attention mass on each role. The
fraction kept is also given over every query. Rows are data (``rows``); ``page`` tabulates them.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import torch

from ..data import make_task
from ..data.task import TEST_SEED, TaskBatch
from ..layers.tra import TRAAttention
from ..layers.tra_inspect import attention_map
from ..metrics import sequence_metrics
from ..models import TransformerLM
from ..training.checkpoint import TRAIN_CONFIG_NAME, resolve_checkpoint
from ..training.config import TrainConfig
from ..utils.checks import is_int

SUMMARY = ("kept, all queries", "kept", "keys kept", "no key kept", "mass on window-only keys")


@dataclass
class Inspected:
    """One checkpoint at one length: its accuracy there and the per-(layer, head) statistics."""

    label: str
    length: int
    accuracy: float
    stats: dict[tuple[int, int], dict[str, float]]
    roles: tuple[str, ...]


def load(checkpoint) -> tuple[TransformerLM, TrainConfig, Path]:
    """The model of a run or checkpoint (fp64, evaluation mode) and its training config."""
    path = resolve_checkpoint(checkpoint)
    if not (path / TRAIN_CONFIG_NAME).is_file():
        raise ValueError(f"--checkpoint {path}: no {TRAIN_CONFIG_NAME}; expected a checkpoint of a training run")
    config = TrainConfig.from_dict(json.loads((path / TRAIN_CONFIG_NAME).read_text()), where=path / TRAIN_CONFIG_NAME)
    model = TransformerLM.from_pretrained(path).double().eval()
    if not any(isinstance(block.attn, TRAAttention) for block in model.blocks):
        raise ValueError(f"--checkpoint {path}: attention = {config.model.attention!r}; expected a TRA kind")
    return model, config, path


def batches(config: TrainConfig, factors, data, sequences: int, seed: int) -> list[tuple[int, TaskBatch]]:
    """(length, batch) to inspect: fresh iid sequences at each multiple of the training length, or a data file's."""
    task = make_task(config.task, **config.task_args)
    if data is not None:
        return [(batch.tokens.shape[1], batch) for batch in task.read_text(data)]
    return [(f * config.length, task.sample(sequences, f * config.length, seed + i)) for i, f in enumerate(factors)]


def inspect_model(model: TransformerLM, task, batch: TaskBatch) -> tuple[dict, tuple[str, ...]]:
    """Per (layer, head) statistics of ``model`` on ``batch``, over the queries before scored tokens."""
    inputs = {}
    hooks = [
        block.attn.register_forward_hook(lambda module, args, _out, i=i: inputs.__setitem__(i, args[0]))
        for i, block in enumerate(model.blocks)
        if isinstance(block.attn, TRAAttention)
    ]
    try:
        with torch.no_grad():
            model(batch.tokens[:, :-1])
    finally:
        for hook in hooks:
            hook.remove()
    s = batch.tokens.shape[1] - 1
    scored = batch.loss_mask[:, 1:]  # (N, S): the queries whose next token is scored
    causal = torch.ones(s, s, dtype=torch.bool).tril()
    named = task.key_roles(batch.tokens)
    names, roles = named if named is not None else ((), None)
    if roles is not None:
        roles = roles[:, :s, :s] if roles.dim() == 3 else roles[:, None, :s].expand(-1, s, s)
    stats = {}
    for layer, x in inputs.items():
        amap = attention_map(model.blocks[layer].attn, x)
        for head in range(amap.keep.shape[1]):
            keep, weights = amap.keep[:, head], amap.weights[:, head]
            fraction = keep.sum(-1) / causal.sum(-1)  # (N, S)
            kept = keep.sum(-1).double()
            row = {
                "kept, all queries": fraction.double().mean().item(),
                "kept": fraction[scored].double().mean().item(),
                "keys kept": kept[scored].mean().item(),
                "no key kept": (kept[scored] == 0).double().mean().item(),
                "mass on window-only keys": (weights * amap.window_only[:, head]).sum(-1)[scored].mean().item(),
            }
            for index, name in enumerate(names):
                present = (roles == index) & causal
                count = present[scored].sum().item()
                row[f"kept: {name}"] = (keep & present)[scored].sum().item() / count if count else math.nan
                row[f"mass: {name}"] = (weights * present).sum(-1)[scored].mean().item()
            stats[(layer, head)] = row
    return stats, tuple(names)


def run_labels(checkpoints, labels=None) -> list[str]:
    """One label per checkpoint, each unique (every table is keyed by them): ``labels`` as given, else the
    folders' names, else (where two names collide) the paths as given."""
    if labels:
        labels = list(labels)
        if len(labels) != len(checkpoints):
            raise ValueError(f"--labels: {len(labels)} labels for {len(checkpoints)} checkpoints; expected one each")
        blank = [label for label in labels if not label.strip() or label != label.strip()]
        if blank:
            raise ValueError(f"--labels: {blank!r}; expected names that are not empty and do not begin or end with a "
                             "space (each is a row of the tables)")  # fmt: skip
    else:
        labels = [Path(c).name for c in checkpoints]
        if len(set(labels)) < len(labels):
            labels = [str(c) for c in checkpoints]
    repeated = sorted({label for label in labels if labels.count(label) > 1})
    if repeated:
        raise ValueError(
            f"--labels: {repeated} name more than one checkpoint; expected a unique label per checkpoint (a "
            "checkpoint given twice, or --labels with a name repeated)"
        )
    return labels


def inspect_runs(checkpoints, labels=None, factors=(1, 2, 8), data=None, sequences: int = 32, seed: int = TEST_SEED):
    """Every checkpoint at every length: a list of ``Inspected``. Labels default to the run folders' names."""
    if not is_int(sequences) or sequences <= 0:
        raise ValueError(f"--sequences = {sequences!r}; expected a positive number of sequences per length")
    if data is None and (not factors or any(not isinstance(f, int) or f <= 0 for f in factors)):
        raise ValueError(f"--lengths = {factors!r}; expected positive multiples of the training length")
    labels = run_labels(checkpoints, labels)
    found = []
    for checkpoint, label in zip(checkpoints, labels):
        model, config, _ = load(checkpoint)
        task = make_task(config.task, **config.task_args)
        for length, batch in batches(config, factors, data, sequences, seed):
            accuracy = sequence_metrics(model, batch.tokens, batch.loss_mask, targets=batch.targets)["full_seq_acc"]
            stats, roles = inspect_model(model, task, batch)
            found.append(Inspected(label, length, accuracy, stats, roles))
    return found


def rows(found: list[Inspected]) -> list[dict]:
    """One row per (run, length, layer, head, metric), and one per (run, length) for the accuracy."""
    out = []
    for item in found:
        common = {"run": item.label, "length": item.length}
        out.append({**common, "layer": None, "head": None, "metric": "full_seq_acc", "value": item.accuracy})
        for (layer, head), values in item.stats.items():
            out += [{**common, "layer": layer, "head": head, "metric": m, "value": v} for m, v in values.items()]
    return out


def _cell(value: float) -> str:
    return "n/a" if math.isnan(value) else f"{value:.3f}"


def from_rows(found_rows: list[dict]) -> list[Inspected]:
    """The inspections ``rows`` wrote, back from their rows."""
    items: dict[tuple[str, int], Inspected] = {}
    for r in found_rows:
        key = (r["run"], r["length"])
        item = items.setdefault(key, Inspected(r["run"], r["length"], math.nan, {}, ()))
        if r["layer"] is None:
            item.accuracy = r["value"]
            continue
        item.stats.setdefault((r["layer"], r["head"]), {})[r["metric"]] = r["value"]
        if r["metric"].startswith("kept: ") and r["metric"][6:] not in item.roles:
            item.roles = (*item.roles, r["metric"][6:])
    return list(items.values())


def page(found: list[Inspected], command: str) -> str:
    """The Markdown page of ``tra inspect``: its command, then ``tables``."""
    return "\n".join(["# What TRA keeps", "", f"Command: `{command}`  ", "", *tables(found)]) + "\n"


def tables(found: list[Inspected]) -> list[str]:
    """Accuracy per run and length, then per length the summary and the roles per head."""
    lines = []
    runs = list(dict.fromkeys(item.label for item in found))
    lengths = sorted({item.length for item in found})
    accuracy = {(item.label, item.length): item.accuracy for item in found}
    lines += ["## Full-sequence accuracy", "", "| run | " + " | ".join(f"{n} tokens" for n in lengths) + " |"]
    lines += ["|---|" + "---|" * len(lengths)]
    for run in runs:
        cells = [_cell(accuracy[(run, n)]) if (run, n) in accuracy else "-" for n in lengths]
        lines.append(f"| {run} | " + " | ".join(cells) + " |")
    by_length = defaultdict(list)
    for item in found:
        by_length[item.length].append(item)
    for length in lengths:
        items = by_length[length]
        lines += [
            "",
            f"## {length} tokens",
            "",
            "Over the queries before scored tokens (and, first column, every query).",
            "",
        ]
        lines += ["| run | layer | head | " + " | ".join(SUMMARY) + " |", "|---|---|---|" + "---|" * len(SUMMARY)]
        for item in items:
            for (layer, head), values in item.stats.items():
                lines.append(
                    f"| {item.label} | {layer} | {head} | " + " | ".join(_cell(values[m]) for m in SUMMARY) + " |"
                )
        roles = items[0].roles
        if roles:
            lines += ["", "Kept rate / attention mass by the role of the key:", ""]
            lines += ["| run | layer | head | " + " | ".join(roles) + " |", "|---|---|---|" + "---|" * len(roles)]
            for item in items:
                for (layer, head), v in item.stats.items():
                    cells = [f"{_cell(v[f'kept: {r}'])} / {_cell(v[f'mass: {r}'])}" for r in roles]
                    lines.append(f"| {item.label} | {layer} | {head} | " + " | ".join(cells) + " |")
    return lines
