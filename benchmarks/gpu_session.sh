#!/usr/bin/env bash
# The prepared GPU session, for the day a GPU is lent: about 12 minutes on one H200 (estimated, not yet
# measured). Run from the repository root on a machine with a CUDA GPU, PyTorch and Triton installed:
#     bash benchmarks/gpu_session.sh [OUT_DIR]
# Writes into OUT_DIR (default: results/benchmarks/gpu_session):
#   gpu_tests.log          the CUDA tests of the op (Triton kernels against the reference, the keep surrogate's
#                          and logit dropout's kernels included)
#   attention_gpu.md       the op benchmark (TRA fused kernels vs SDPA-flash, fwd and fwd+bwd, memory), with rows
#                          for the training options (local window 4 + keep surrogate 1, and with logit dropout 0.1)
#                          and their bf16 errors against the fp32 chunked path
#   lm_throughput_gpu.md   bf16 training tokens/s and peak memory, TRA and TRA with local window 4 + keep
#                          surrogate 1 (the surrogate in the fused backward) vs NoPE (SDPA-flash), L = 2k and 8k,
#                          12 layers, d_model 768 (paper-like), 64k tokens per step
#   compile.log            a TRA model trained for 20 steps through torch.compile (bf16)
set -euo pipefail
out="${1:-results/benchmarks/gpu_session}"
mkdir -p "$out"
pip install -q --no-deps -e . >/dev/null
pip install -q pytest hypothesis >/dev/null
python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())" \
    | tee "$out/device.txt"
python -m pytest -q tests/ops/test_triton.py tests/ops/test_tra_op.py tests/ops/test_tra_surrogate.py \
    tests/ops/test_tra_dropout.py 2>&1 | tee "$out/gpu_tests.log" | tail -5
python benchmarks/attention.py --device cuda --out "$out/attention_gpu.md"
python benchmarks/lm_throughput.py --device cuda --precision bf16 --lengths 2048 8192 --model 768 12 12 \
    --methods nope tra tra:local_window=4,keep_surrogate=1 --tokens-per-step 65536 --steps 20 --repeats 1 \
    --out "$out/lm_throughput_gpu.md"
python -m tra_attn lm train --device cuda --precision bf16 --compile --length 2048 --batch-size 8 --steps 20 \
    --d-model 768 --n-layers 12 --n-heads 12 --eval-every 0 --log-every 5 --no-progress \
    --out "$out/compile_run" 2>&1 | tee "$out/compile.log" | tail -3
cat "$out/compile_run/metrics.jsonl" >> "$out/compile.log"
rm -rf "$out/compile_run"
