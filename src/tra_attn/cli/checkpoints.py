"""``tra eval``, ``tra inspect`` and ``tra convert``: commands on a trained model."""

from __future__ import annotations

from ..data import TASKS
from ..utils.cli_help import HelpFormatter
from ..utils.os_errors import writing
from .args import device_arg, file_arg, path_arg
from .train import check_output_file


def cmd_eval(args) -> None:
    if args.text is not None:
        cmd_eval_text(args)
        return
    from ..training.evaluation import evaluate_checkpoint
    from ..utils.rows import write_rows

    if args.out:
        check_output_file(args.out, "--out")
    rows = evaluate_checkpoint(
        args.checkpoint,
        data=args.data,
        sequences=args.sequences,
        device=args.device,
        length=args.length,
        task=args.task,
    )
    if args.out:
        with writing("result rows", args.out):
            write_rows(args.out, rows)
    table: dict[tuple, dict] = {}
    for r in rows:
        table.setdefault((r["split"], r["length"]), {})[r["metric"]] = r["value"]
    metrics = list(next(iter(table.values())))
    print(f"{'split':<10} {'length':>6}  " + "  ".join(f"{name:>13}" for name in metrics))
    for (split, length), values in table.items():
        cells = (f"{v:>13.4f}" if isinstance(v, float) else f"{v:>13}" for v in (values[name] for name in metrics))
        print(f"{split:<10} {length:>6}  " + "  ".join(cells))


def cmd_eval_text(args) -> None:
    """``tra eval --text``: a language model on any text, as ``tra lm eval --text`` with its defaults."""
    from ..experiments.lm.evaluate import prepare_lm_eval
    from .lm import run_lm_eval

    if args.data is not None:
        raise ValueError("--data and --text: expected one of them (--text for a language model)")
    run_lm_eval(prepare_lm_eval(args.checkpoint, device=args.device, text=args.text, length=args.length), args.out)


def cmd_inspect(args) -> None:
    from ..experiments.inspect import inspect_runs, page, rows
    from ..utils.atomic import atomic_write_text
    from ..utils.jsonl import write_jsonl

    for flag, path in (("--out", args.out), ("--rows", args.rows)):
        if path is not None:
            check_output_file(path, flag)
    found = inspect_runs(args.checkpoint, args.labels, tuple(args.lengths), args.data, args.sequences)
    text = page(found, " ".join(["tra", *map(str, args.argv)]))
    if args.out:
        with writing("inspection page", args.out):
            atomic_write_text(args.out, text)
    if args.rows:
        with writing("inspection rows", args.rows):
            write_jsonl(args.rows, rows(found))
    print(text)


def cmd_convert(args) -> None:
    try:
        from ..hf import to_hf, to_native
    except ImportError as err:
        raise ValueError(str(err)) from None
    out = (to_hf if args.to == "hf" else to_native)(args.source, args.out)
    print(f"wrote {args.to} model: {out}")


def add_eval_command(sub) -> None:
    ev = sub.add_parser(
        "eval", help="evaluate a checkpoint on its task's test splits or on a data file", formatter_class=HelpFormatter
    )
    ev.add_argument(
        "--checkpoint",
        type=path_arg,
        required=True,
        help="a checkpoint, a run, a save_pretrained folder or a Hugging Face folder of `tra convert` (required)",
    )
    ev.add_argument("--data", type=file_arg, help="evaluate on these sequences instead, one per line (default: none)")
    ev.add_argument(
        "--text",
        type=path_arg,
        help="a language model on this text: a file, a .gz file or a folder (`tra lm eval --text`; default: none)",
    )
    ev.add_argument("--sequences", type=int, default=1000, help="sequences per generated split at the training length")
    ev.add_argument("--length", type=int, help="training length (default: from the checkpoint's training config)")
    ev.add_argument(
        "--task",
        choices=sorted(TASKS),
        help="task, for a model saved without a training config; the run's own keeps its task arguments, another "
        "takes its defaults (default: its run's)",
    )
    ev.add_argument("--device", type=device_arg, default="cpu", help="cpu, cuda or cuda:N")
    ev.add_argument("--out", type=file_arg, help="write the result rows here as JSONL (default: print only)")
    ev.set_defaults(func=cmd_eval)


def add_inspect_command(sub) -> None:
    ins = sub.add_parser(
        "inspect",
        help="what trained TRA models keep: per layer and head, kept keys, counts and attention mass by key role",
        formatter_class=HelpFormatter,
    )
    ins.add_argument("--checkpoint", type=path_arg, nargs="+", required=True, help="TRA runs or checkpoints (required)")
    ins.add_argument("--labels", nargs="+", help="a name per checkpoint for the tables (default: the folder names)")
    ins.add_argument(
        "--lengths", type=int, nargs="+", default=[1, 2, 8], help="multiples of the training length to inspect at"
    )
    ins.add_argument("--data", type=file_arg, help="inspect on these sequences instead, one per line (default: none)")
    ins.add_argument("--sequences", type=int, default=32, help="generated sequences per length")
    ins.add_argument("--out", type=file_arg, help="write the Markdown page here (default: print only)")
    ins.add_argument("--rows", type=file_arg, help="write the measurements as JSONL rows here (default: none)")
    ins.set_defaults(func=cmd_inspect)


def add_convert_command(sub) -> None:
    cv = sub.add_parser(
        "convert",
        help="convert a model between this library's format and Hugging Face's (needs the [hf] extra)",
        formatter_class=HelpFormatter,
    )
    cv.add_argument(
        "source", type=path_arg, help="a native model, run or checkpoint (--to hf), or a Hugging Face folder"
    )
    cv.add_argument("--to", choices=("hf", "native"), required=True, help="the output format (required)")
    cv.add_argument("--out", type=path_arg, required=True, help="a new output directory (required)")
    cv.set_defaults(func=cmd_convert)
