"""The ``tra`` command: generate data, train, evaluate, run the flip-flop comparison, build reports."""

from __future__ import annotations

import argparse
import dataclasses
import json
import shlex
import sys
from pathlib import Path

from .config import ModelConfig
from .train import TrainConfig


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _add_config_flags(parser: argparse.ArgumentParser) -> None:
    """One flag per TrainConfig and ModelConfig field (model fields by their own names)."""
    group = parser.add_argument_group("config overrides (default: the TrainConfig / ModelConfig defaults)")
    for cls in (TrainConfig, ModelConfig):
        for f in dataclasses.fields(cls):
            if f.name == "model":
                continue
            default = f.default if f.default is not dataclasses.MISSING else None
            if isinstance(default, bool):
                group.add_argument(_flag(f.name), action=argparse.BooleanOptionalAction, default=None)
            else:
                group.add_argument(_flag(f.name), type=type(default), default=None, metavar=type(default).__name__)


def _config_from_args(args) -> TrainConfig:
    data = json.loads(Path(args.config).read_text()) if args.config else {}
    model = dict(data.pop("model", {}))
    for f in dataclasses.fields(ModelConfig):
        if getattr(args, f.name, None) is not None:
            model[f.name] = getattr(args, f.name)
    for f in dataclasses.fields(TrainConfig):
        if f.name != "model" and getattr(args, f.name, None) is not None:
            data[f.name] = getattr(args, f.name)
    model.setdefault("vocab_size", 6)  # flip-flop's vocabulary
    return TrainConfig.from_dict({**data, "model": model})


def cmd_data(args) -> None:
    from .tasks.flipflop import FlipFlop, statistics, write_text

    if args.num <= 0:
        raise ValueError(f"--num = {args.num}; expected a positive number of sequences")
    batch = FlipFlop(args.p_ignore, final_read=args.final_read).sample(args.num, args.length, args.seed)
    write_text(args.out, batch)
    print(json.dumps({"out": str(args.out), **statistics(batch)}))


def cmd_train(args) -> None:
    from .train import train

    config = _config_from_args(args)
    checkpoint = train(config, args.out, resume=args.resume, progress=not args.no_progress)
    print(f"trained {config.model.attention}: {checkpoint}")


def cmd_eval(args) -> None:
    from .evaluate import evaluate_checkpoint
    from .utils.jsonl import write_jsonl

    if args.sequences <= 0:
        raise ValueError(f"--sequences = {args.sequences}; expected a positive integer")
    rows = evaluate_checkpoint(
        args.checkpoint, data=args.data, sequences=args.sequences, device=args.device, length=args.length
    )
    if args.out:
        write_jsonl(args.out, rows)
    print("split      length  full_seq_acc  read_acc  sequences")
    table = {}
    for r in rows:
        table.setdefault((r["split"], r["length"]), {})[r["metric"]] = r["value"]
    for (split, length), m in table.items():
        print(f"{split:<10} {length:>6}  {m['full_seq_acc']:>12.4f}  {m['read_acc']:>8.4f}  {int(m['sequences']):>9}")


def cmd_flipflop(args) -> None:
    from .experiments.flipflop import run_flipflop

    command = "tra " + shlex.join(args.argv)
    out = run_flipflop(
        args.preset,
        methods=args.methods,
        seeds=args.seeds,
        steps=args.steps,
        lrs=args.lrs,
        out=args.out,
        device=args.device,
        progress=not args.no_progress,
        command=command,
    )
    print((out / "results.md").read_text())


def cmd_report(args) -> None:
    from .report import write_flipflop_report

    path = write_flipflop_report(args.results, notes=args.notes, markdown=args.markdown, command=args.command or "")
    print(path.read_text())


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tra", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    data = sub.add_parser("data", help="write generated task sequences to a text file")
    data_sub = data.add_subparsers(dest="task", required=True)
    ff = data_sub.add_parser("flipflop", help="FFL(p) sequences, one per line ('w1i0r1...')")
    ff.add_argument("--p-ignore", type=float, default=0.8)
    ff.add_argument("--length", type=int, default=512, help="tokens per sequence (even)")
    ff.add_argument("--num", type=int, default=1000)
    ff.add_argument("--seed", type=int, default=0)
    ff.add_argument(
        "--final-read",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="force the last instruction to be a read",
    )
    ff.add_argument("--out", type=Path, required=True)
    ff.set_defaults(func=cmd_data)

    tr = sub.add_parser("train", help="train one model (flags override --config)")
    tr.add_argument("--config", type=Path, help="a TrainConfig JSON (e.g. a run's train_config.json)")
    tr.add_argument("--out", type=Path, required=True, help="run directory")
    tr.add_argument("--resume", action="store_true", help="continue from the run's latest checkpoint")
    tr.add_argument("--no-progress", action="store_true")
    _add_config_flags(tr)
    tr.set_defaults(func=cmd_train)

    ev = sub.add_parser("eval", help="evaluate a checkpoint on the flip-flop splits or on a data file")
    ev.add_argument("--checkpoint", type=Path, required=True, help="a checkpoint or run directory")
    ev.add_argument("--data", type=Path, help="evaluate on these sequences instead (one per line)")
    ev.add_argument("--sequences", type=int, default=1000, help="sequences per generated split")
    ev.add_argument("--length", type=int, help="training length (default: from the checkpoint's training config)")
    ev.add_argument("--device", default="cpu")
    ev.add_argument("--out", type=Path, help="write the result rows here (JSONL)")
    ev.set_defaults(func=cmd_eval)

    fl = sub.add_parser("flipflop", help="the main job: TRA vs ablations vs baselines on flip-flop")
    fl.add_argument("--preset", default="cpu", help="cpu (default), paper (GPU) or tiny (a smoke test)")
    fl.add_argument("--methods", nargs="+", help="default: all")
    fl.add_argument("--seeds", type=int, nargs="+", help="default: the preset's")
    fl.add_argument("--steps", type=int, help="override the preset's training steps")
    fl.add_argument("--lrs", type=float, nargs="+", help="learning rates to sweep (default: the preset's per method)")
    fl.add_argument("--out", type=Path, help="default: runs/flipflop_<preset>")
    fl.add_argument("--device", default="cpu")
    fl.add_argument("--no-progress", action="store_true")
    fl.set_defaults(func=cmd_flipflop)

    rp = sub.add_parser("report", help="rebuild the Markdown table and plot of a flip-flop results directory")
    rp.add_argument("results", type=Path)
    rp.add_argument("--notes", type=Path, help="Markdown appended as a discussion section")
    rp.add_argument("--markdown", type=Path, help="where to write the page (default: RESULTS/results.md)")
    rp.add_argument("--command", help="the command that produced the rows, shown on the page")
    rp.set_defaults(func=cmd_report)
    return parser


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    try:
        args.func(args)
    except ValueError as err:
        print(f"tra: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("tra: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
