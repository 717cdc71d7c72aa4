"""``tra lm ...``: language models on real text. ``train`` is ``tra train --task lm`` with the corpus flags;
``eval`` and ``sample`` call experiments/lm. Comparisons on text are questions (``tra run results/text``)."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..utils.cli_help import HelpFormatter
from ..utils.os_errors import writing
from .args import device_arg, file_arg, finite_float, path_arg
from .train import add_train_flags, check_output_file, parse_seed
from .train import cmd_train as train_command


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


# `tra lm train` flags that are parameters of the lm task: their destinations (not the bare names, which
# would collide with config fields such as ModelConfig.tokenizer) and the task_args they set.
TASK_FLAGS = {
    "lm_corpus": "corpus",
    "lm_tokenizer": "tokenizer",
    "lm_data_dir": "data_dir",
    "lm_validation_text": "validation_text",
}


def cmd_train(args) -> None:
    """`tra train --task lm`, with the lm task's parameters as first-class flags."""
    given = [(name, str(getattr(args, dest))) for dest, name in TASK_FLAGS.items() if getattr(args, dest) is not None]
    if args.lm_pack:  # recorded only when given, so runs without it keep their task_args
        given.append(("pack", True))
    args.task = "lm"
    args.task_arg = given + (args.task_arg or [])
    train_command(args)


def add_lm_command(sub: argparse._SubParsersAction) -> None:
    lm = sub.add_parser("lm", help="language models on real text", formatter_class=HelpFormatter)
    lm_sub = lm.add_subparsers(dest="lm_command", required=True, metavar="COMMAND")
    tp = lm_sub.add_parser(
        "train",
        help="train one language model (`tra train --task lm` with the corpus flags below)",
        formatter_class=HelpFormatter,
    )
    tp.add_argument(
        "--corpus", dest="lm_corpus", help="austen, wikitext103, or a text/gzip file or folder (default: austen)"
    )
    tp.add_argument("--tokenizer", dest="lm_tokenizer", help="byte or gpt2 (default: byte)")
    tp.add_argument(
        "--data-dir",
        dest="lm_data_dir",
        type=path_arg,
        help="folder of a benchmark corpus's files (default: austen ships with the package; wikitext103 is read "
        "through the datasets package)",
    )
    tp.add_argument(
        "--validation-text",
        dest="lm_validation_text",
        type=file_arg,
        help="held-out text when --corpus is a path (default: none)",
    )
    tp.add_argument(
        "--pack",
        dest="lm_pack",
        action="store_true",
        help="train on packed documents: windows carry each token's document, no token attends to another "
        "document and none predicts across a boundary (validation reads the text as one stream either way)",
    )
    add_train_flags(tp)
    tp.set_defaults(func=cmd_train)

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
