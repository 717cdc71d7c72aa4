"""What the Triton kernels' main loops cost on a Hopper SM, counted from their sm_90a machine code, without a GPU.

    python benchmarks/triton_cost_model.py [--out results/benchmarks/triton_cost_model.md]

Each variant of the forward and backward kernel is compiled ahead of time for sm_90a (``ops/tra/triton_aot.py``:
the ptxas and cuobjdump of the triton wheel). The key-block loop is found in the disassembly (the loop holding the
tensor-core instructions, between a backward branch and its target) and its instructions are counted by class. One
iteration handles one (BM, BN) tile of scores with ``warps`` warps, so per tile an SM needs at least:

- tensor cycles: the loop's tensor-core FLOPs (from each HGMMA/HMMA's shape) / 4,096 dense BF16 FLOPs per clock;
- issue cycles: the loop's instructions x warps / 4 (four schedulers, one warp instruction each per clock);
- MUFU cycles: its MUFU instructions (exp2) x warps x 32 lanes / 16 lanes per clock.

The largest is the tile's floor: no schedule of this machine code beats it. A flash kernel doing the same tile's
GEMMs at the tensor-core rate takes the tensor cycles of the attention's own GEMMs (4 BM BN D FLOPs forward, 10
backward), so their ratio to the floor is the most this code can reach against flash; the measured ratio sits below
it by whatever latency the schedule leaves unhidden. The backward's dK/dV reductions (RED instructions, fp32) are
reported as bytes per tile beside the cycles HBM would need for them (they resolve in L2, so this is an indication).
Rates per SM and clock are those of the H100 and H200 (same SM: 132 of them, 989 dense BF16 TFLOP/s at 1.83 GHz).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

TENSOR_FLOPS_PER_CLOCK = 4096  # dense BF16 per SM and clock on sm_90 (989.4 TFLOP/s / 132 SMs / 1.83 GHz)
ISSUE_PER_CLOCK = 4  # warp instructions per SM and clock (four sub-partitions)
MUFU_LANES_PER_CLOCK = 16  # special-function lanes per SM and clock
HBM_BYTES_PER_CLOCK = {"H100": 3.35e12 / 132 / 1.83e9, "H200": 4.8e12 / 132 / 1.83e9}
SMS, CLOCK = 132, 1.83e9
GPU_SESSION = "results/benchmarks/gpu_session/attention_gpu.md"  # the one measurement on a GPU so far

CLASSES = {  # SASS opcode -> class of the instruction mix
    "tensor": ("HGMMA", "HMMA", "WARPGROUP"),
    "shuffle": ("SHFL",),
    "special function": ("MUFU",),
    "fp32": ("FADD", "FMUL", "FFMA", "FMNMX", "FSEL", "FSETP", "FCHK"),
    "integer and predicate": (
        "ISETP",
        "IADD3",
        "IMAD",
        "LEA",
        "LOP3",
        "SEL",
        "P2R",
        "R2P",
        "PLOP3",
        "VIADD",
        "SHF",
        "IABS",
        "IMNMX",
        "PRMT",
        "UIADD3",
        "UMOV",
        "USHF",
        "ULOP3",
        "ULEA",
        "UISETP",
        "USEL",
        "USGXT",
        "UIMAD",
        "ISCADD",
        "IMNMX",
        "VIMNMX",
        "MOV",
        "S2R",
        "S2UR",
        "CS2R",
    ),  # fmt: skip
    "conversion": ("F2FP", "F2F", "I2F", "F2I", "I2FP", "F2IP"),
    "memory": (
        "LDS",
        "STS",
        "LDG",
        "STG",
        "LDGSTS",
        "LDSM",
        "STSM",
        "LDGDEPBAR",
        "DEPBAR",
        "BAR",
        "RED",
        "ATOM",
        "ATOMS",
        "ATOMG",
        "UTMALDG",
        "SYNCS",
        "ARRIVES",
        "FENCE",
        "MEMBAR",
    ),  # fmt: skip
}


def variants(block_d: int) -> dict[str, tuple[dict, bool, bool]]:
    """Name -> (tiles, the in-tile count as a triangular matmul, the interior blocks in a loop of their own): the
    shipped kernels, the opt-in variants (``triton_op``: TRA_TRITON_DOT_SCAN, TRA_TRITON_INTERIOR) and wider key
    blocks."""
    from tra_attn.ops.tra.triton_op import CONFIGS

    shipped = CONFIGS[block_d]
    wide = {**shipped, "BN": 64}
    bn = shipped["BN"]
    return {
        f"shipped (BN {bn})": (shipped, False, False),
        f"BN {bn}, dot count": (shipped, True, False),
        f"BN {bn}, interior loop": (shipped, False, True),
        f"BN {bn}, interior loop, dot count": (shipped, True, True),
        "BN 64, dot count": (wide, True, False),
        "BN 64, interior loop, dot count": (wide, True, True),
    }


def instructions(sass: str) -> list[tuple[int, str]]:
    """(address, instruction without its predicate) of every line of the disassembly."""
    found = []
    for line in sass.splitlines():
        m = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;", line)
        if m:
            found.append((int(m.group(1), 16), re.sub(r"^@!?U?P[T0-9]+\s+", "", m.group(2).strip())))
    return found


def main_loop(sass: str) -> list[str]:
    """The instructions of the key-block loop, from a backward branch's target to the branch: of the loops holding
    the most tensor-core instructions, the shortest (the interior blocks' loop where there is one, which runs
    nearly every block of a long sequence)."""
    code = instructions(sass)
    loops = []
    for address, text in code:
        m = re.match(r"BRA (?:`\(\.L_x_\d+\) )?0x([0-9a-f]+)", text)
        if m and int(m.group(1), 16) < address:
            start = int(m.group(1), 16)
            loops.append([t for a, t in code if start <= a <= address])
    if not loops:
        raise RuntimeError("no loop found in the disassembly")
    most = max(sum(t.startswith(("HGMMA", "HMMA")) for t in body) for body in loops)
    return min((body for body in loops if sum(t.startswith(("HGMMA", "HMMA")) for t in body) == most), key=len)


def tensor_flops(body: list[str], warps: int) -> int:
    """FLOPs of the loop's tensor-core instructions for the whole CTA: an HGMMA.MxNxK runs once per warpgroup (4
    warps), an HMMA.MNK (mma.sync, e.g. 16816) once per warp."""
    flops = 0
    for text in body:
        if m := re.match(r"HGMMA\.(\d+)x(\d+)x(\d+)", text):
            m_, n, k = map(int, m.groups())
            flops += 2 * m_ * n * k * (warps // 4)
        elif m := re.match(r"HMMA\.(\d\d)(\d)(\d+)", text):
            m_, n, k = map(int, m.groups())
            flops += 2 * m_ * n * k * warps
    return flops


def mix(body: list[str]) -> Counter:
    counts = Counter()
    for text in body:
        op = text.split()[0].split(".")[0]
        counts[next((c for c, ops in CLASSES.items() if op in ops), "other")] += 1
    return counts


def analyse(kind: str, block_d: int, config: dict, dot_scan: bool, interior: bool = False) -> dict:
    from tra_attn.ops.tra.triton_aot import compile_one

    row = compile_one(kind, "bf16", block_d, False, config=config, dot_scan=dot_scan, interior=interior,
                      with_sass=True)  # fmt: skip
    body = main_loop(row.pop("sass"))
    warps, bm, bn = row["warps"], row["BM"], row["BN"]
    counts = mix(body)
    red = sum(text.startswith(("RED", "ATOM")) for text in body)
    attention_flops = (4 if kind == "fwd" else 10) * bm * bn * block_d  # the GEMMs flash does for the same tile
    cycles = {
        "tensor": tensor_flops(body, warps) / TENSOR_FLOPS_PER_CLOCK,
        "issue": len(body) * warps / ISSUE_PER_CLOCK,
        "MUFU": counts["special function"] * warps * 32 / MUFU_LANES_PER_CLOCK,
    }
    floor = max(cycles.values())
    return {
        **row,
        "loop": len(body),
        "per_score": len(body) * warps * 32 / (bm * bn),
        "mix": counts,
        "cycles": cycles,
        "floor": floor,
        "bound": max(cycles, key=cycles.get),
        "ratio": attention_flops / TENSOR_FLOPS_PER_CLOCK / floor,
        "tflops": attention_flops / floor * SMS * CLOCK / 1e12,
        "red_bytes": red * warps * 32 * 4,
    }


def measured() -> dict[tuple[int, int], dict[str, float]]:
    """TFLOP/s of the plain TRA and SDPA-flash rows of the one GPU session, per (S, D) and method-direction."""
    page = ROOT / GPU_SESSION
    found: dict = {}
    if not page.is_file():
        return found
    for line in page.read_text().splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) >= 5 and cells[0].isdigit() and cells[2] in ("TRA", "SDPA flash"):
            key = "tra" if cells[2] == "TRA" else "flash"
            found.setdefault((int(cells[0]), int(cells[1])), {}).update(
                {f"{key} fwd": float(cells[3]), f"{key} bwd": float(cells[4])}
            )
    return found


def measured_lines(results: dict) -> list[str]:
    """The shipped kernels' floor beside what the one GPU session measured (an H200, another commit)."""
    rows = [
        "| S | D | direction | SDPA flash TFLOP/s (share of 989) | TRA TFLOP/s | TRA's floor here | measured / floor |",
        "|---|---|---|---|---|---|---|",
    ]
    for (seq, block_d), values in sorted(measured().items()):
        for kind, direction in (("fwd", "forward"), ("bwd", "backward")):
            shipped = next((r for (d, k, name), r in results.items() if d == block_d and k == kind
                            and name.startswith("shipped")), None)  # fmt: skip
            if shipped is None or f"tra {kind}" not in values:
                continue
            flash, tra = values[f"flash {kind}"], values[f"tra {kind}"]
            rows.append(f"| {seq} | {block_d} | {direction} | {flash:.0f} ({flash / 989:.0%}) | {tra:.0f} | "
                        f"{shipped['tflops']:.0f} | {tra / shipped['tflops']:.2f} |")  # fmt: skip
    if len(rows) == 2:
        return []
    shares = [values[f"flash {k}"] / 989 for values in measured().values() for k in ("fwd", "bwd")]
    return [
        "## Beside the one measurement",
        "",
        f"[{GPU_SESSION}](gpu_session/attention_gpu.md) measured the kernels of its commit on an H200 (bf16, causal, "
        f"16k tokens per batch). SDPA-flash itself reaches {min(shares):.0%}-{max(shares):.0%} of the tensor-core rate "
        "there, and the shipped "
        "kernels reach a fraction of the floor above: two gaps, the instructions per score (the floor) and the "
        "latency their schedule leaves unhidden (measured / floor).",
        "",
        *rows,
        "",
    ]


def budget_lines() -> list[str]:
    """The issue's speed goals as instructions per score: at most D / (8 r) forward and 10 D / (32 r) backward
    for a ratio r to a flash kernel at the tensor-core rate."""
    goals = [("forward", 128, 0.6, 8.0), ("forward", 64, 0.5, 8.0), ("backward", 128, 0.45, 3.2),
             ("backward", 64, 0.45, 3.2)]  # fmt: skip
    cells = [f"{direction} at D = {d}, {r}x: {d / (k * r):.0f}" for direction, d, r, k in goals]
    return [
        "The goals as a budget: a ratio r to a flash kernel at the tensor-core rate allows at most D / (8 r) "
        "instructions per score forward and 10 D / (32 r) backward (issue-bound, as every variant here is): "
        + "; ".join(cells)
        + ".",
        "",
    ]


def page(results: dict[tuple[int, str, str], dict], command: str) -> list[str]:
    from tra_attn.utils.provenance import git_commit

    lines = [
        "# The Triton kernels' cost on a Hopper SM, from their machine code",
        "",
        f"Command: `{command}`  ",
        f"Code: commit {git_commit()}  ",
        "Machine: none needed: every kernel is compiled ahead of time for sm_90a (H100, H200) by the triton wheel's "
        "ptxas, and its disassembly read with cuobjdump; no GPU runs here.",
        "",
        __doc__.split("\n\n", 2)[2].strip(),
        "",
    ]
    classes = list(CLASSES) + ["other"]
    for kind, title in (("fwd", "Forward"), ("bwd", "Backward")):
        lines += [f"## {title} (bf16, causal, no options)", ""]
        lines += [
            "| D | variant | BM x BN, warps | registers (spills) | loop instructions | per score | tensor / issue / "
            "MUFU cycles per tile | bound | most vs flash | TFLOP/s at the floor |"
            + (" dK/dV RED bytes per tile (HBM cycles, H100) |" if kind == "bwd" else ""),
            "|---" * (10 + (kind == "bwd")) + "|",
        ]
        for (block_d, k, name), r in results.items():
            if k != kind:
                continue
            c = r["cycles"]
            cells = [
                str(block_d), name, f"{r['BM']} x {r['BN']}, {r['warps']}", f"{r['registers']} ({r['spill_bytes']} B)",
                str(r["loop"]), f"{r['per_score']:.1f}", f"{c['tensor']:.0f} / {c['issue']:.0f} / {c['MUFU']:.0f}",
                r["bound"], f"{r['ratio']:.2f}x", f"{r['tflops']:.0f}",
            ]  # fmt: skip
            if kind == "bwd":
                cells.append(f"{r['red_bytes']:,} ({r['red_bytes'] / HBM_BYTES_PER_CLOCK['H100']:.0f})")
            lines.append("| " + " | ".join(cells) + " |")
        lines += ["", f"Instruction mix of the loop, per thread and iteration ({title.lower()}):", ""]
        lines += ["| D | variant | " + " | ".join(classes) + " |", "|---" * (len(classes) + 2) + "|"]
        for (block_d, k, name), r in results.items():
            if k == kind:
                lines.append(f"| {block_d} | {name} | " + " | ".join(str(r["mix"][c]) for c in classes) + " |")
        lines.append("")
    lines += [
        '"per score": warp-lane instructions per score of the tile (the loop\'s instructions x warps x 32 / '
        "(BM x BN)). "
        '"most vs flash": the flash GEMMs\' tensor cycles over this floor, the ratio a perfect schedule of this code '
        'would reach against a flash kernel at the tensor-core rate. "TFLOP/s at the floor": the attention\'s FLOPs '
        "(flash's count, 4 BM BN D forward and 10 backward per tile) at the floor on 132 SMs at 1.83 GHz, before "
        "the causal diagonal's half-empty tiles and the launch.",
        "",
        *budget_lines(),
        *measured_lines(results),
    ]
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=ROOT / "results" / "benchmarks" / "triton_cost_model.md")
    parser.add_argument("--head-dims", type=int, nargs="+", default=[64, 128])
    args = parser.parse_args(argv)
    results = {}
    for block_d in args.head_dims:
        for name, (config, dot_scan, interior) in variants(block_d).items():
            for kind in ("fwd", "bwd"):
                results[(block_d, kind, name)] = analyse(kind, block_d, config, dot_scan, interior)
                r = results[(block_d, kind, name)]
                print(f"{kind} D={block_d} {name}: {r['loop']} instructions, {r['per_score']:.1f} per score, "
                      f"bound by {r['bound']}, at most {r['ratio']:.2f}x flash", flush=True)  # fmt: skip
    from tra_attn.utils.atomic import atomic_write_text

    command = "python benchmarks/triton_cost_model.py" + "".join(f" {a}" for a in (argv or sys.argv[1:]))
    atomic_write_text(args.out, "\n".join(page(results, command)) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
