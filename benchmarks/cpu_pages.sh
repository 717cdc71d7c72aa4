#!/usr/bin/env bash
# The CPU speed pages, for the native build and for the AVX2 build with PyTorch held to AVX2 too
# (benchmarks/cpu_builds.py), one after another (run on an otherwise idle machine: each measurement's ratio is to a
# baseline of the same run, but two heavy jobs on the same cores slow each other unevenly). About 45 minutes on 2
# cores. Each page names its own command; run one of them to remeasure one page.
#     bash benchmarks/cpu_pages.sh [native|avx2 ...]
set -euo pipefail
cd "$(dirname "$0")/.."
for build in "${@:-native avx2}"; do
    for b in $build; do
        python benchmarks/attention.py --build "$b" --threads 1 2 --out "results/benchmarks/attention_cpu_$b.md"
        python benchmarks/lm_throughput.py --build "$b" --threads 2 --methods nope tra \
            tra:local_window=4,keep_surrogate=1 fox --lengths 512 --steps 30 --repeats 3 \
            --out "results/benchmarks/lm_throughput_cpu_$b.md"
        OMP_NUM_THREADS=2 python benchmarks/decoding.py --build "$b" --contexts 2048 8192 --batches 1 4 \
            --new-tokens 32 --repeats 5 --out "results/benchmarks/decoding_cpu_$b.md"
    done
done
