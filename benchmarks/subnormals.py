"""What subnormal numbers cost TRA's chunked backward on CPU: one training step of a language model, three ways.

    python benchmarks/subnormals.py [--length 2048] [--tokens 8192] [--repeats 2] \
        [--out results/benchmarks/subnormals_cpu.md]

A fwd+bwd step (loss and gradients; no optimizer) of the CPU language-model preset's model (4 layers, d_model
128, 4 heads, byte vocabulary, random tokens) with exact TRA and with the recommended TRA's options
(``tra:local_window=4,keep_surrogate=1``), timed (best of ``--repeats`` after one warm-up step, wall clock) with
the backward's flush of tiny weights as committed (ops/tra/denormals.py) and with it disabled (the weights
clamped at the exp floor reach the GEMMs, whose products with small gradients are subnormal). docs/backward.md,
section 8, explains.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from cpu_builds import describe  # noqa: E402
from tra_attn import ModelConfig, TransformerLM  # noqa: E402
from tra_attn.ops.tra import chunked, surrogate_backward  # noqa: E402
from tra_attn.utils.atomic import atomic_write_text  # noqa: E402
from tra_attn.utils.provenance import git_commit  # noqa: E402

CONFIGS = {"tra": {}, "tra:local_window=4,keep_surrogate=1": {"local_window": 4, "keep_surrogate": 1.0}}
FLUSH = chunked.flush_tiny_


def set_flush(enabled: bool) -> None:
    """Turn the backward's flush of tiny weights on (as committed) or off, in both modules that call it."""
    flush = FLUSH if enabled else (lambda weights: weights)
    chunked.flush_tiny_ = surrogate_backward.flush_tiny_ = flush


def step_seconds(options: dict, ids: torch.Tensor, repeats: int) -> float:
    """The best wall-clock time of a fwd+bwd step, after one warm-up step."""
    torch.manual_seed(0)
    config = ModelConfig(vocab_size=256, d_model=128, n_layers=4, n_heads=4, attention="tra", attention_options=options)
    model = TransformerLM(config).train()
    times = []
    for _ in range(repeats + 1):
        start = time.perf_counter()
        model(ids[:, :-1], labels=ids[:, 1:]).mean().backward()
        times.append(time.perf_counter() - start)
    return min(times[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--length", type=int, default=2048, help="tokens per row (default: 2048)")
    parser.add_argument("--tokens", type=int, default=8192, help="tokens per step (default: 8192)")
    parser.add_argument("--repeats", type=int, default=2, help="timed steps per setting (default: 2)")
    parser.add_argument("--out", type=Path, help="write the Markdown table here (default: print only)")
    args = parser.parse_args()
    if args.length <= 0 or args.tokens % args.length:
        raise SystemExit(f"--length {args.length}: expected a positive divisor of --tokens {args.tokens}")
    ids = torch.randint(
        0, 256, (args.tokens // args.length, args.length + 1), generator=torch.Generator().manual_seed(0)
    )
    rows = []
    for name, options in CONFIGS.items():
        cells = []
        for flush in (True, False):
            set_flush(flush)
            cells.append(step_seconds(options, ids, args.repeats))
        set_flush(True)
        rows.append(f"| {name} | {cells[0]:.2f} s | {cells[1]:.2f} s | {cells[1] / cells[0]:.1f}x |")
    lines = [
        "# Subnormal numbers in TRA's chunked backward (CPU)",
        "",
        f"Command: `python benchmarks/subnormals.py {' '.join(sys.argv[1:])}`".rstrip() + "  ",
        f"Machine: {describe(None, torch.get_num_threads())}; commit {git_commit()}",
        "",
        f"One fwd+bwd step of a 4-layer, d_model 128, 4-head language model on {args.tokens // args.length} x "
        f"{args.length} random tokens, best of {args.repeats} after a warm-up (wall clock).",
        "",
        "| method | flush (as committed) | no flush | no flush / flush |",
        "|---|---|---|---|",
        *rows,
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        atomic_write_text(args.out, text)


if __name__ == "__main__":
    main()
