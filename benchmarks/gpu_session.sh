#!/usr/bin/env bash
# The prepared GPU session: the CUDA tests of the Triton kernels, then the GPU benchmark.
# Run from the repository root on a machine with a CUDA GPU, PyTorch and Triton installed:
#     bash benchmarks/gpu_session.sh [OUT_DIR]
# Writes OUT_DIR/attention_gpu.md (default: results/) and OUT_DIR/gpu_tests.log.
set -euo pipefail
out="${1:-results}"
mkdir -p "$out"
pip install -q --no-deps -e . >/dev/null
pip install -q pytest hypothesis >/dev/null
python -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())"
python -m pytest -q tests/test_triton.py tests/test_tra_op.py 2>&1 | tee "$out/gpu_tests.log" | tail -5
python benchmarks/attention.py --device cuda --out "$out/attention_gpu.md"
