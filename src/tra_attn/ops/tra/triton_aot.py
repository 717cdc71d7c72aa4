"""Ahead-of-time compile every shipped TRA kernel configuration for a GPU target, without a GPU.

Uses the ptxas and cuobjdump bundled with the triton wheel, so it runs on a CPU-only machine and
catches compile errors, register spills (local-memory STACK bytes), shared-memory overflow and a
missing tensor-core path before anything reaches a GPU:

    python -m tra_attn.ops.tra.triton_aot            # table; exit code 1 on spills or failures
    python -m tra_attn.ops.tra.triton_aot --json     # one JSON object per kernel configuration
    python -m tra_attn.ops.tra.triton_aot --quick    # the training kernels in their worst case only (CI)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

os.environ.pop("TRITON_INTERPRET", None)  # AOT compilation needs the real JIT, not the interpreter

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from .triton_kernels import tra_bwd_kernel, tra_fwd_kernel  # noqa: E402
from .triton_op import CONFIGS, DOT_SCAN, INTERIOR  # noqa: E402

SHARED_MEMORY_LIMIT = 227 * 1024  # bytes per block on sm_90
_DATA_POINTERS = {"Q", "K", "V", "O", "DO"}  # in the input dtype
# int32: visited key blocks, segment ids, document starts, the dropout hash's row and key keys
_INT_POINTERS = {"KSTART", "SEGK", "SEGQ", "QSTART", "DROPR", "DROPC"}
_POINTERS = _DATA_POINTERS | _INT_POINTERS | {"G", "SMAX", "LSE", "CNT", "MAX", "DELTA", "DQ", "DK", "DV", "DG"}
_FLOAT_SCALARS = {"scale", "threshold", "tau2", "drop_scale", "tau", "cap2"}
_WINDOWS = {"local_window", "sliding_window"}  # i32 scalars (the keep rule's windows), with no alignment


def _alignment(fn) -> dict:
    """Divisibility hints the JIT derives for typical inputs (16-byte aligned tensors, strides that
    are multiples of 16); without them Triton neither vectorises nor software-pipelines the loads."""
    strides = [name for name in fn.arg_names if name.startswith("s") and name not in _FLOAT_SCALARS | _WINDOWS]
    aligned = [i for i, name in enumerate(fn.arg_names) if name in _POINTERS or name in strides]
    return {(i,): [["tt.divisibility", 16]] for i in aligned}


def _signature(fn, dtype: str, constexprs: dict) -> dict[str, str]:
    """Triton types of a kernel's arguments, derived from their names."""
    signature = {}
    for name in fn.arg_names:
        if name in constexprs:
            signature[name] = "constexpr"
        elif name in _POINTERS:
            signature[name] = "*" + (dtype if name in _DATA_POINTERS else "i32" if name in _INT_POINTERS else "fp32")
        else:
            signature[name] = "fp32" if name in _FLOAT_SCALARS else "i32"
    return signature


TRAINING = ((True, False), (False, True), (True, True))  # (dropout, surrogate): the training-only kernels


def shipped_configurations(all_training: bool = True):
    """(kind, dtype, padded head dim, prune, segments, training) for every configuration the library can launch;
    ``training`` is the pair (dropout, surrogate) of the training-only options (never with pruning). Without
    ``all_training`` the training kernels are compiled only in bf16 with segments, their largest register use
    (fp16 compiles the same code, and segments only add to it): a quicker check."""
    for block_d in sorted(CONFIGS):
        for dtype in ("bf16", "fp16"):
            for segments in (False, True):
                yield "fwd", dtype, block_d, False, segments, (False, False)
                yield "fwd", dtype, block_d, True, segments, (False, False)
                yield "bwd", dtype, block_d, False, segments, (False, False)
                if all_training or (dtype == "bf16" and segments):
                    yield "fwd", dtype, block_d, False, segments, (True, False)
                    for training in TRAINING:
                        yield "bwd", dtype, block_d, False, segments, training


def compile_one(
    kind: str,
    dtype: str,
    block_d: int,
    prune: bool,
    segments: bool = False,
    training: tuple[bool, bool] = (False, False),
    arch: int = 90,
    config: dict | None = None,
    dot_scan: bool = DOT_SCAN,
    interior: bool = INTERIOR,
    with_sass: bool = False,
) -> dict:
    """Compile one configuration for ``arch`` and report its resources (``config``: tiles other than the shipped
    ones; ``dot_scan``: the in-tile count's form; ``interior``: the interior blocks' loop of their own;
    ``with_sass``: the row also holds the disassembly)."""
    config = config or CONFIGS[block_d]
    bn, (bm, warps, stages) = config["BN"], config[kind]
    if kind == "bwd" and training[1]:
        bm, warps, stages = config.get("bwd_surrogate", config["bwd"])
    constexprs = {"D": block_d, "BLOCK_D": block_d, "BM": bm, "BN": bn, "DOT_SCAN": dot_scan, "IEEE": False}
    constexprs["HAS_SEG"] = segments
    constexprs["INTERIOR"] = interior
    constexprs["DROPOUT"] = training[0]
    if kind == "fwd":
        constexprs["PRUNE"] = prune
    else:
        constexprs["FWD_BM"] = config["fwd"][0]
        constexprs["SURROGATE"] = training[1]
    fn = tra_fwd_kernel if kind == "fwd" else tra_bwd_kernel
    signature = _signature(fn, dtype, constexprs)
    compiled = triton.compile(
        ASTSource(fn=fn, signature=signature, constexprs=constexprs, attrs=_alignment(fn)),
        target=GPUTarget("cuda", arch, 32),
        options={"num_warps": warps, "num_stages": stages},
    )
    bindir = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"])
        f.flush()
        usage = subprocess.run(
            [os.path.join(bindir, "cuobjdump"), "--dump-resource-usage", f.name],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        sass = subprocess.run(
            [os.path.join(bindir, "cuobjdump"), "--dump-sass", f.name], capture_output=True, text=True, check=True
        ).stdout
    found = re.search(r"REG:(\d+) STACK:(\d+)", usage)
    row = {
        "kernel": kind,
        "dtype": dtype,
        "D": block_d,
        "prune": prune,
        "segments": segments,
        "dropout": training[0],
        "surrogate": training[1],
        "BM": bm,
        "BN": bn,
        "warps": warps,
        "stages": stages,
        "target": re.search(r"\.target (\S+)", compiled.asm["ptx"]).group(1),
        "registers": int(found.group(1)),
        "spill_bytes": int(found.group(2)),
        "shared_bytes": compiled.metadata.shared,
        "wgmma": sass.count("HGMMA"),
        "pipelined": "async_copy" in compiled.asm["ttgir"],  # key/value loads prefetched asynchronously
        "mma": sass.count("HMMA"),
    }
    return {**row, "sass": sass} if with_sass else row


def problems(row: dict) -> list[str]:
    issues = []
    if row["spill_bytes"]:
        issues.append(f"{row['spill_bytes']} bytes of register spills")
    if row["shared_bytes"] > SHARED_MEMORY_LIMIT:
        issues.append(f"{row['shared_bytes']} bytes of shared memory")
    if not (row["wgmma"] or row["mma"]):
        issues.append("no tensor-core instructions")
    if not row["pipelined"] and not row["prune"]:  # the early-exit forward is a while loop: never pipelined
        issues.append("key/value loads not software-pipelined")
    return issues


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--arch", type=int, default=90, help="compute capability, e.g. 90 for H100/H200 (sm_90a)")
    parser.add_argument(
        "--quick", action="store_true", help="the training-only kernels in bf16 with segments only (their worst case)"
    )
    args = parser.parse_args(argv)
    failed = False
    for kind, dtype, block_d, prune, segments, training in shipped_configurations(not args.quick):
        try:
            row = compile_one(kind, dtype, block_d, prune, segments, training, args.arch)
            row["problems"] = problems(row)
        except Exception as err:  # report every configuration, then fail
            row = {
                "kernel": kind,
                "dtype": dtype,
                "D": block_d,
                "prune": prune,
                "segments": segments,
                "dropout": training[0],
                "surrogate": training[1],
                "problems": [f"{type(err).__name__}: {str(err)[:300]}"],
            }
        failed |= bool(row["problems"])
        if args.json:
            print(json.dumps(row), flush=True)
        else:
            stats = (
                f"REG {row['registers']:>3} spill {row['spill_bytes']:>4} B smem {row['shared_bytes']:>6} B "
                f"wgmma {row['wgmma']:>3}"
                if "registers" in row
                else ""
            )
            print(
                f"{kind} {dtype} D={block_d:<3} prune={prune!s:<5} segments={segments!s:<5} "
                f"dropout={training[0]!s:<5} surrogate={training[1]!s:<5} {stats} "
                f"{'; '.join(row['problems']) or 'ok'}",
                flush=True,
            )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
