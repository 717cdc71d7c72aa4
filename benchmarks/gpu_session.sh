#!/usr/bin/env bash
# The prepared GPU session: one call of about 7 minutes on one H200 (measured 2026-12-04: tests 148 s, op benchmark
# 59 s, throughput 52 s, compile about 75 s; the kernel variants' op benchmark, added since, about 60 s more), sized
# to the 15 minutes of device time a session is lent, machine start included. Run from the repository root on a machine with a CUDA GPU, PyTorch
# and Triton installed; it needs no network (the library is imported from src/, nothing is installed):
#     bash benchmarks/gpu_session.sh [OUT_DIR]
# Each stage runs under its own time limit, so a slow stage costs only itself. Writes into OUT_DIR (default:
# results/benchmarks/gpu_session):
#   device.txt             torch, Triton, the GPU, and each stage's exit status and seconds
#   gpu_tests.log          the CUDA tests of the op (Triton kernels against the chunked reference, windows, documents,
#                          the keep surrogate's and logit dropout's kernels, the non-finite contract)
#   attention_gpu.md       the op benchmark (TRA fused kernels vs SDPA-flash, fwd and fwd+bwd, memory), with rows
#                          for the training options and their bf16 errors against the fp32 chunked path
#   lm_throughput_gpu.md   bf16 training tokens/s and peak memory, TRA and TRA with local window 4 + keep
#                          surrogate 1 vs NoPE (SDPA-flash), L = 2k, 12 layers, d_model 768, 64k tokens per step
#   compile.log            a TRA model trained for 10 steps through torch.compile (bf16)
#   attention_gpu_variants.md  the op benchmark again with the opt-in kernel variants on (the interior blocks' own
#                          loop and the count as a triangular matmul: TRA_TRITON_INTERIOR=1 TRA_TRITON_DOT_SCAN=1;
#                          their instruction floors: results/benchmarks/triton_cost_model.md), beside SDPA-flash
set -uo pipefail
out="${1:-results/benchmarks/gpu_session}"
mkdir -p "$out"
py="$(command -v python3 || command -v python)"
export PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
"$py" -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())" \
    | tee "$out/device.txt"

stage() {  # stage NAME SECONDS COMMAND...: run one stage under its limit and record how it ended
    local name="$1" limit="$2" start=$SECONDS
    shift 2
    timeout "$limit" "$@"
    echo "stage $name: exit $? after $((SECONDS - start)) s (limit $limit s)" | tee -a "$out/device.txt"
}

workers=$(( $(nproc) < 16 ? $(nproc) : 16 ))  # pytest-xdist: the Triton compilations are CPU-bound
stage tests 240 bash -c "'$py' -m pytest -q -p no:cacheprovider -p no:benchmark -n $workers -rfE --tb=short \
    tests/ops/test_triton.py tests/ops/test_tra_op.py tests/ops/test_tra_surrogate.py tests/ops/test_tra_dropout.py \
    tests/ops/test_tra_windows.py tests/ops/test_tra_varlen.py tests/ops/test_nonfinite.py > '$out/gpu_tests.log' 2>&1"
tail -3 "$out/gpu_tests.log"
stage attention 100 "$py" benchmarks/attention.py --device cuda --lengths 4096 16384 --repeats 10 \
    --out "$out/attention_gpu.md"
stage lm_throughput 100 "$py" benchmarks/lm_throughput.py --device cuda --precision bf16 --lengths 2048 \
    --model 768 12 12 --methods nope tra tra:local_window=4,keep_surrogate=1 --tokens-per-step 65536 --steps 10 \
    --repeats 1 --out "$out/lm_throughput_gpu.md"
stage compile 120 bash -c "'$py' -m tra_attn train --task lm --device cuda --precision bf16 --compile --length 2048 \
    --batch-size 8 --steps 10 --d-model 768 --n-layers 12 --n-heads 12 --eval-every 0 --log-every 5 --no-progress \
    --out /tmp/compile_run > '$out/compile.log' 2>&1; code=\$?; cat /tmp/compile_run/metrics.jsonl >> '$out/compile.log'; exit \$code"
tail -3 "$out/compile.log"
stage attention_variants 100 env TRA_TRITON_INTERIOR=1 TRA_TRITON_DOT_SCAN=1 "$py" benchmarks/attention.py \
    --device cuda --lengths 4096 16384 --repeats 10 --out "$out/attention_gpu_variants.md"
