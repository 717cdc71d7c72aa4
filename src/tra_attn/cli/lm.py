"""``tra lm ...``: language models on real text, once trained (``tra train --task lm --corpus ...``): ``eval`` and
``sample`` call experiments/lm. Comparisons on text are questions (``tra run results/text``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..utils.cli_help import HelpFormatter
from ..utils.os_errors import writing
from .args import device_arg, file_arg, finite_float, path_arg
from .train import check_output_file, parse_seed


def cmd_sample(args) -> None:
    from ..experiments.lm.sample import sample_text

    top_k = args.top_k or None
    text = sample_text(
        args.checkpoint, args.prompt, args.max_new_tokens, args.temperature, top_k, args.seed, args.device
    )
    print(args.prompt + text)


def run_lm_eval(evaluation, out: Path | None) -> None:
    """Run a checked evaluation (``prepare_lm_eval``), write its rows to ``out`` as JSONL and print the table;
    ``out``'s folder is created only now, after every check, so bad input leaves nothing behind."""
    from ..experiments.lm.evaluate import print_table
    from ..utils.rows import write_rows

    if out:
        check_output_file(out, "--out")
    rows = evaluation.rows()
    if out:
        with writing("result rows", out):
            write_rows(out, rows)
    print_table(rows)
    print(evaluation.span_line())


def cmd_eval(args) -> None:
    from ..experiments.lm.evaluate import prepare_lm_eval

    run_lm_eval(
        prepare_lm_eval(
            args.checkpoint,
            args.factors,
            args.stride,
            args.tokens,
            args.buckets,
            args.device,
            text=args.text,
            offset=args.offset,
            length=args.length,
        ),
        args.out,
    )


def add_lm_command(sub: argparse._SubParsersAction) -> None:
    lm = sub.add_parser("lm", help="language models on real text", formatter_class=HelpFormatter)
    lm_sub = lm.add_subparsers(dest="lm_command", required=True, metavar="COMMAND")
    sp = lm_sub.add_parser(
        "sample", help="continue a prompt with a trained model (KV-cache decoding)", formatter_class=HelpFormatter
    )
    sp.add_argument(
        "--checkpoint",
        type=path_arg,
        required=True,
        help="a checkpoint, a run, a save_pretrained folder or a Hugging Face folder of `tra convert`",
    )
    sp.add_argument("--prompt", required=True, help="text to continue (required)")
    sp.add_argument("--max-new-tokens", type=int, default=200, help="tokens to generate")
    sp.add_argument("--temperature", type=finite_float, default=0.8, help="0 decodes greedily")
    sp.add_argument("--top-k", type=int, default=0, help="sample among the k most likely tokens; 0 keeps them all")
    sp.add_argument("--seed", type=parse_seed, default=0, help="the same seed gives the same text")
    sp.add_argument("--device", type=device_arg, default="cpu", help="cpu, cuda or cuda:N")
    sp.set_defaults(func=cmd_sample)

    ev = lm_sub.add_parser(
        "eval",
        help="perplexity and bits per byte at 1x-16x the training length, loss against position",
        formatter_class=HelpFormatter,
    )
    ev.add_argument(
        "--checkpoint",
        type=path_arg,
        required=True,
        help="a run, a checkpoint, a save_pretrained folder or a Hugging Face folder of `tra convert` (required)",
    )
    ev.add_argument(
        "--text",
        type=path_arg,
        help="score this text instead: a file, a .gz file or a folder of *.txt / *.txt.gz, tokenized with the "
        "model's tokenizer (default: the run's validation text)",
    )
    ev.add_argument(
        "--length",
        type=int,
        help="training length, for a model saved without its run (default: from the training config)",
    )
    ev.add_argument(
        "--factors", type=int, nargs="+", default=[1, 2, 4, 8, 16], help="window lengths, x training length"
    )
    ev.add_argument("--stride", type=int, help="also evaluate sliding windows with this stride (default: none)")
    ev.add_argument(
        "--tokens",
        type=int,
        help="score N tokens, the same at every length; the span must lie inside the text, and the output states "
        "it (default: all of the text)",
    )
    ev.add_argument(
        "--offset", type=int, help="the scored tokens start at this token (default: the last --tokens of the text)"
    )
    ev.add_argument("--buckets", type=int, default=8, help="position buckets of the loss-against-position rows")
    ev.add_argument("--device", type=device_arg, default="cpu", help="cpu, cuda or cuda:N")
    ev.add_argument("--out", type=file_arg, help="write the result rows here as JSONL (default: print only)")
    ev.set_defaults(func=cmd_eval)
