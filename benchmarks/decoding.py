"""Decoding speed with a KV cache: tokens/s of greedy generation for each method, against NoPE (PyTorch SDPA).

    python benchmarks/decoding.py [--methods nope rope fox tra tra:local_window=4] [--contexts 2048 8192] \
        [--batches 1 4] [--new-tokens 32] [--repeats 3] [--build native|avx2] \
        [--out results/benchmarks/decoding_cpu_native.md]

A model of each method (by default the CPU language-model preset's size: byte vocabulary, 4 layers, d_model 128,
4 heads; freshly initialised, as speed does not depend on training) prefills a random prompt of each context
length once into its cache, then times ``--new-tokens`` greedy steps as ``TransformerLM.generate`` takes them (each
one query against the whole cache). Rounds alternate the methods, and so does which goes first, so that machine
noise hits all of them alike; the table gives the median over rounds and each method's ratio to NoPE in the same
round (median of the per-round ratios). Prefill time (the prompt's forward) is reported beside it. Run it on an
otherwise idle machine. ``--build`` runs it under a build's settings (benchmarks/cpu_builds.py: the process starts
again with them), and the page names the CPU, the build and the threads.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from cpu_builds import describe, environment, in_build  # noqa: E402

if __name__ == "__main__" and "--build" in sys.argv:  # the build's settings must be set before torch starts
    build = sys.argv[sys.argv.index("--build") + 1] if sys.argv.index("--build") + 1 < len(sys.argv) else None
    if build in ("native", "avx2") and not in_build(build):
        os.execve(sys.executable, [sys.executable, *sys.argv], environment(build))

import torch  # noqa: E402

from tra_attn.experiments.methods import method_from_text  # noqa: E402
from tra_attn.models.config import ModelConfig  # noqa: E402
from tra_attn.models.lm import TransformerLM  # noqa: E402
from tra_attn.utils.atomic import atomic_write_text  # noqa: E402
from tra_attn.utils.provenance import git_commit  # noqa: E402

BASELINE = "nope"


def build(method: str, args, context: int) -> TransformerLM:
    """A freshly initialised model of ``method`` (``KIND`` or ``KIND:NAME=VALUE,...``) in eval mode."""
    variant = method_from_text(method)
    d_model, n_layers, n_heads = args.model
    options = {"max_pos": context} if variant.kind == "cope" else {}
    config = ModelConfig(
        vocab_size=256, d_model=d_model, n_layers=n_layers, n_heads=n_heads, dropout=0.0, attention=variant.kind,
        attention_options={**options, **variant.options}, **variant.model,
    )  # fmt: skip
    torch.manual_seed(0)
    return TransformerLM(config).eval()


def measure(model: TransformerLM, prompt: torch.Tensor, new_tokens: int) -> tuple[float, float]:
    """(prefill seconds, decoding tokens/s): the prompt's forward into a fresh cache, then ``new_tokens`` greedy
    steps of one token per row, each timed from the previous step's logits to its own (as in ``generate``)."""
    with torch.no_grad():
        cache = model.new_cache(capacity=prompt.shape[1] + new_tokens)
        start = time.perf_counter()
        logits = model(prompt, cache=cache)[:, -1]
        prefill = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(new_tokens):
            logits = model(logits.argmax(-1)[:, None], cache=cache)[:, -1]
        steps = time.perf_counter() - start
    return prefill, prompt.shape[0] * new_tokens / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--methods", nargs="+", default=["nope", "rope", "alibi", "fox", "tra", "tra:local_window=4"])
    parser.add_argument("--contexts", type=int, nargs="+", default=[2048, 8192])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 4])
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--model", type=int, nargs=3, default=[128, 4, 4], metavar=("D_MODEL", "LAYERS", "HEADS"))
    parser.add_argument("--build", choices=("native", "avx2"), help="a build's settings (benchmarks/cpu_builds.py)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    methods = list(dict.fromkeys([BASELINE, *args.methods]))
    header = "| context | batch | method | tokens/s (median) | rounds | vs nope | prefill s (median) |"
    rows = [header, "|---|---|---|---|---|---|---|"]
    for context in args.contexts:
        for batch in args.batches:
            prompt = torch.randint(0, 256, (batch, context), generator=torch.Generator().manual_seed(context))
            models = {m: build(m, args, context + args.new_tokens + 1) for m in methods}
            for model in models.values():  # warm-up: allocator, lazy initialisation
                measure(model, prompt[:, :64], 2)
            speeds = {m: [] for m in methods}
            prefills = {m: [] for m in methods}
            for round_ in range(args.repeats):
                order = methods if round_ % 2 == 0 else methods[::-1]
                for method in order:
                    prefill, speed = measure(models[method], prompt, args.new_tokens)
                    speeds[method].append(speed)
                    prefills[method].append(prefill)
            for method in methods:
                ratio = statistics.median(s / b for s, b in zip(speeds[method], speeds[BASELINE]))
                runs = ", ".join(f"{s:.0f}" for s in speeds[method])
                rows.append(
                    f"| {context} | {batch} | {method} | {statistics.median(speeds[method]):.0f} | {runs} | "
                    f"{ratio:.2f}x | {statistics.median(prefills[method]):.3f} |"
                )
                print(rows[-1], flush=True)
    d_model, n_layers, n_heads = args.model
    command = " ".join(["python benchmarks/decoding.py", *sys.argv[1:]])
    text = "\n".join([
        f"# Decoding speed with a KV cache (cpu, fp32{f', {args.build} build' if args.build else ''})",
        "",
        f"Command: `{command}`  ",
        f"Machine: {describe(args.build, torch.get_num_threads())}  ",
        f"Code: commit {git_commit()}",
        "",
        f"Model: byte-level, d_model {d_model}, {n_layers} layers, {n_heads} heads, freshly initialised; a random "
        f"prompt of each context length prefilled once, then {args.new_tokens} greedy steps, {args.repeats} "
        "round(s) with the methods interleaved. Tokens/s: batch x steps / seconds of the steps; vs nope: median of "
        "the per-round ratios.",
        "",
        *rows,
        "",
    ])  # fmt: skip
    if args.out:
        atomic_write_text(args.out, text)
    else:
        print(text)


if __name__ == "__main__":
    main()
