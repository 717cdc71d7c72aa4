"""benchmarks/triton_cost_model.py: its reading of sm_90a machine code, checked against what the kernels must do (the
tensor-core FLOPs of a tile follow from its shape), on kernels compiled ahead of time here (no GPU)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")
SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "triton_cost_model.py"


def load():
    spec = importlib.util.spec_from_file_location("triton_cost_model", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SASS = """
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        /*0010*/                   HGMMA.64x32x16.F32.BF16 gdesc[UR4], RZ, !UPT ;
        /*0020*/              @P0 SHFL.BFLY PT, R3, R2, 0x1, 0x1f ;
        /*0030*/                   MUFU.EX2 R4, R3 ;
        /*0040*/                   HMMA.16816.F32.BF16 R8, R12, R16, R8 ;
        /*0050*/               @P0 BRA 0x10 ;
        /*0060*/                   EXIT ;
        /*0070*/                   BRA 0x70;
"""


def test_the_loop_its_tensor_flops_and_its_mix_from_a_disassembly():
    model = load()
    body = model.main_loop(SASS)
    assert body == ["HGMMA.64x32x16.F32.BF16 gdesc[UR4], RZ, !UPT", "SHFL.BFLY PT, R3, R2, 0x1, 0x1f",
                    "MUFU.EX2 R4, R3", "HMMA.16816.F32.BF16 R8, R12, R16, R8", "BRA 0x10"]  # fmt: skip
    # 8 warps: the HGMMA runs on 2 warpgroups, the HMMA on 8 warps.
    assert model.tensor_flops(body, 8) == 2 * 64 * 32 * 16 * 2 + 2 * 16 * 8 * 16 * 8
    mix = model.mix(body)
    assert (mix["tensor"], mix["shuffle"], mix["special function"], mix["other"]) == (2, 1, 1, 1)


ANALYSE = """
import importlib.util, json, sys
spec = importlib.util.spec_from_file_location("m", sys.argv[1]); m = importlib.util.module_from_spec(spec)
spec.loader.exec_module(m)
from tra_attn.ops.tra.triton_op import CONFIGS
row = m.analyse("fwd", 64, CONFIGS[64], sys.argv[2] == "1")
print(json.dumps({k: row[k] for k in ("BM", "BN", "cycles", "floor", "ratio", "spill_bytes", "mix")}))
"""


@pytest.mark.parametrize("dot_scan", [False, True], ids=["cumsum", "dot"])
def test_a_forward_tile_does_the_attentions_gemms_and_the_dot_count(dot_scan):
    """QK^T and PV are 4 BM BN D FLOPs a tile; the count as a triangular matmul adds 2 BM BN BN. (In a process of
    its own: compiling for a GPU needs the JIT, not the interpreter the tests run Triton under.)"""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    argv = [sys.executable, "-c", ANALYSE, str(SCRIPT), str(int(dot_scan))]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    row = json.loads(proc.stdout.strip().splitlines()[-1])
    bm, bn = row["BM"], row["BN"]
    expected = 4 * bm * bn * 64 + (2 * bm * bn * bn if dot_scan else 0)
    assert row["cycles"]["tensor"] * load().TENSOR_FLOPS_PER_CLOCK == expected
    assert row["floor"] == max(row["cycles"].values()) and 0 < row["ratio"] <= 1
    assert row["mix"]["special function"] > 0 and row["spill_bytes"] == 0
