"""What a trained TRA language model's attention does: per layer and head, the fraction of causal keys
kept, how often the previous token's key is kept (and, per layer, how often no head keeps it), how often a
query keeps no key at all, the forget gate, and the largest kept score against its bound sqrt(D).

    python benchmarks/tra_attention_stats.py --checkpoint results/lm_austen/runs/tra/lr0.001-seed0 \
        [--windows 16] [--out stats.md]

Scores the first ``--windows`` training-length windows of the model's validation text.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tra_attn import TransformerLM  # noqa: E402
from tra_attn.data import make_task  # noqa: E402
from tra_attn.layers.tra import TRAAttention  # noqa: E402
from tra_attn.training.checkpoint import TRAIN_CONFIG_NAME, resolve_checkpoint  # noqa: E402
from tra_attn.training.config import TrainConfig  # noqa: E402
from tra_attn.utils.atomic import atomic_write_text  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, required=True, help="a TRA language-model run or checkpoint")
    parser.add_argument("--windows", type=int, default=16, help="validation windows to score (default: 16)")
    parser.add_argument("--out", type=Path, help="also write the table here as Markdown (default: print only)")
    args = parser.parse_args()
    path = resolve_checkpoint(args.checkpoint)
    config = TrainConfig.from_dict(json.loads((path / TRAIN_CONFIG_NAME).read_text()))
    model = TransformerLM.from_pretrained(path).eval()
    ids = make_task(config.task, **config.task_args).validation(args.windows, config.length, 0).tokens[:, :-1]
    rows = []
    unseen = {}  # layer: fraction of queries for which no head keeps the previous token's key

    def record(layer: int):
        def hook(attn: TRAAttention, inputs, _output):
            x = inputs[0]
            q, k = attn.normalize(attn.split_heads(attn.q_proj(x)), attn.split_heads(attn.k_proj(x)))
            scores = q @ k.transpose(-1, -2) / attn.head_dim**0.5
            causal = torch.ones(scores.shape[-2:], dtype=torch.bool).tril()
            kept = (scores > attn.options.threshold) & causal
            kept[:, : attn.options.dense_heads] = causal  # dense heads keep every causal key
            log_gate = attn.log_gate(x)
            top = scores.masked_fill(~kept, float("-inf")).amax(-1)
            previous = kept.diagonal(offset=-1, dim1=-2, dim2=-1)  # key i - 1 for query i
            unseen[layer] = (~previous.any(dim=1)).float().mean().item()  # no head of the layer keeps it
            for h in range(scores.shape[1]):
                fraction = (kept[:, h].sum(-1) / causal.sum(-1)).mean().item()
                finite = top[:, h][torch.isfinite(top[:, h])]
                rows.append(
                    (
                        layer,
                        h,
                        fraction,
                        previous[:, h].float().mean().item(),
                        (~kept[:, h].any(-1)).float().mean().item(),
                        log_gate[:, h].mean().item(),
                        log_gate[:, h].exp().mean().item(),
                        finite.mean().item(),
                    )
                )

        return hook

    for i, block in enumerate(model.blocks):
        if not isinstance(block.attn, TRAAttention):
            raise SystemExit(f"--checkpoint: layer {i} is {type(block.attn).__name__}; expected a TRA model")
        block.attn.register_forward_hook(record(i))
    with torch.no_grad():
        model(ids)
    options = model.config.attention_options
    lines = [
        f"Command: `python {' '.join(['benchmarks/tra_attention_stats.py', *sys.argv[1:]])}`  ",
        f"Checkpoint {path}; threshold {options.threshold:g}; dense heads {options.dense_heads}; "
        f"score bound sqrt(D) = {model.config.head_dim**0.5:.2f}; {args.windows} validation windows of "
        f"{config.length} tokens",
        "",
        "| layer | head | kept fraction | previous key kept | queries keeping no key | mean log gate | mean gate "
        "| mean largest kept score |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for layer, head, fraction, previous, empty, log_gate, gate, top in rows:
        cells = [f"{fraction:.3f}", f"{previous:.3f}", f"{empty:.3f}", f"{log_gate:.2f}", f"{gate:.3f}", f"{top:.2f}"]
        lines.append(f"| {layer} | {head} | " + " | ".join(cells) + " |")
    lines += ["", "| layer | queries whose previous token no head keeps |", "|---|---|"]
    lines += [f"| {layer} | {fraction:.3f} |" for layer, fraction in unseen.items()]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        atomic_write_text(args.out, text)


if __name__ == "__main__":
    main()
