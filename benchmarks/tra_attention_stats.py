"""What a trained TRA language model's attention does: per layer and head, the fraction of causal keys
kept, the forget gate, and the largest kept score against its bound sqrt(D).

    python benchmarks/tra_attention_stats.py --checkpoint results/lm_austen/runs/tra/lr0.001-seed0 [--windows 16]

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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", type=Path, required=True, help="a TRA language-model run or checkpoint")
    parser.add_argument("--windows", type=int, default=16, help="validation windows to score (default: 16)")
    args = parser.parse_args()
    path = resolve_checkpoint(args.checkpoint)
    config = TrainConfig.from_dict(json.loads((path / TRAIN_CONFIG_NAME).read_text()))
    model = TransformerLM.from_pretrained(path).eval()
    ids = make_task(config.task, **config.task_args).validation(args.windows, config.length, 0).tokens[:, :-1]
    rows = []

    def record(layer: int):
        def hook(attn: TRAAttention, inputs, _output):
            x = inputs[0]
            q, k = attn.normalize(attn.split_heads(attn.q_proj(x)), attn.split_heads(attn.k_proj(x)))
            scores = q @ k.transpose(-1, -2) / attn.head_dim**0.5
            causal = torch.ones(scores.shape[-2:], dtype=torch.bool).tril()
            kept = (scores > attn.threshold) & causal
            log_gate = attn.log_gate(x)
            top = scores.masked_fill(~kept, float("-inf")).amax(-1)
            for h in range(scores.shape[1]):
                fraction = (kept[:, h].sum(-1) / causal.sum(-1)).mean().item()
                finite = top[:, h][torch.isfinite(top[:, h])]
                rows.append(
                    (
                        layer,
                        h,
                        fraction,
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
    print(f"score bound sqrt(D) = {model.config.head_dim**0.5:.2f}; {args.windows} windows of {config.length} tokens")
    print("| layer | head | kept fraction | mean log gate | mean gate | mean largest kept score |")
    print("|---|---|---|---|---|---|")
    for layer, head, fraction, log_gate, gate, top in rows:
        print(f"| {layer} | {head} | {fraction:.3f} | {log_gate:.2f} | {gate:.3f} | {top:.2f} |")


if __name__ == "__main__":
    main()
