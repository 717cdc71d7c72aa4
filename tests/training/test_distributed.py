"""Data-parallel training under torchrun on CPU (gloo), DDP and FSDP2: several processes reach the weights
of one process with the same global batch (to 1e-6: only the order of fp32 gradient sums differs), a run
whose rank is killed resumes to the uninterrupted result, a run stopped by SIGTERM (alone, or through
torchrun) saves and resumes bit-identically, and runs resume on another number of processes."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from tests.conftest import sharing_kinds
from tra_attn import TransformerLM
from tra_attn.training.checkpoint import load_train_state, resolve_checkpoint

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed not built")

MODEL = ["--d-model", "32", "--n-layers", "2", "--n-heads", "4", "--no-progress"]
RUN = ["--task", "flipflop", "--length", "32", "--batch-size", "8", "--eval-sequences", "16", *MODEL]


def command(out: Path, processes: int, *flags: str) -> list[str]:
    train = ["-m", "tra_attn", "train", "--out", str(out), *RUN, *flags]
    if processes == 1:
        return [sys.executable, *train]
    launcher = ["-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes)]
    return [sys.executable, *launcher, *train]


def launch(out: Path, processes: int, *flags: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command(out, processes, *flags), capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def weights(run: Path) -> dict[str, torch.Tensor]:
    return TransformerLM.from_pretrained(resolve_checkpoint(run)).state_dict()


def children(pid: int) -> list[int]:
    """Child processes of ``pid`` (Linux /proc)."""
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def max_difference(a: dict, b: dict) -> float:
    return max((a[name] - b[name]).abs().max().item() for name in a)


@pytest.mark.parametrize("grad_accum", ["1", "2"])
def test_two_processes_reach_the_weights_of_one(tmp_path, grad_accum):
    flags = ["--steps", "6", "--eval-every", "3", "--checkpoint-every", "3", "--grad-accum", grad_accum]
    launch(tmp_path / "one", 1, *flags)
    two = launch(tmp_path / "two", 2, *flags)
    assert two.stdout.count("trained tra") == 1  # rank 0 alone reports, logs and saves
    # The same global batch and loss; only the order of fp32 gradient sums differs.
    assert max_difference(weights(tmp_path / "one"), weights(tmp_path / "two")) < 1e-6
    rows = [line for line in (tmp_path / "two" / "metrics.jsonl").read_text().splitlines() if "val_" in line]
    assert len(rows) == 2


def test_a_killed_rank_resumes_to_the_uninterrupted_weights(tmp_path):
    flags = ["--steps", "150", "--eval-every", "0", "--checkpoint-every", "10", "--dropout", "0.1"]
    launch(tmp_path / "straight", 2, *flags)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.Popen(
        command(tmp_path / "killed", 2, *flags), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    first = tmp_path / "killed" / "checkpoints" / "step_0000010"
    deadline = time.time() + 120
    while not first.is_dir() and time.time() < deadline and run.poll() is None:
        time.sleep(0.02)
    workers = [pid for pid in children(run.pid) if b"tra_attn" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert workers, "torchrun started no workers"
    os.kill(workers[-1], signal.SIGKILL)  # one rank dies mid-run; torchrun stops the other
    run.communicate(timeout=120)
    assert run.returncode != 0
    killed_at = resolve_checkpoint(tmp_path / "killed").name
    assert killed_at != "step_0000150", "the run finished before a rank was killed"
    launch(tmp_path / "killed", 2, *flags, "--resume")
    # Same processes: bit-identical (dropout is seeded by seed, step and rank; no RNG state is lost).
    assert max_difference(weights(tmp_path / "straight"), weights(tmp_path / "killed")) == 0


@pytest.mark.parametrize("processes", [1, 2], ids=["alone", "torchrun"])
def test_sigterm_saves_the_step_in_progress_and_resumes_bit_identically(tmp_path, processes):
    """A scheduler's SIGTERM, to `tra train` or to torchrun (which forwards it to every worker): the step in
    progress finishes, rank 0 saves it and says so once, no process shows a traceback of the library, and
    --resume ends at the weights of an uninterrupted run."""
    flags = ["--steps", "150", "--eval-every", "0", "--checkpoint-every", "150", "--log-every", "1", "--dropout", "0.1"]
    launch(tmp_path / "straight", processes, *flags)
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.Popen(
        command(tmp_path / "stopped", processes, *flags),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    metrics = tmp_path / "stopped" / "metrics.jsonl"
    deadline = time.time() + 120
    while time.time() < deadline and run.poll() is None and len(read_lines(metrics)) < 3:
        time.sleep(0.02)
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=120)
    stopped = re.findall(
        r"^tra: terminated \(SIGTERM\) after step (\d+): saved a checkpoint; continue with --resume$", err, re.M
    )
    assert len(stopped) == 1, err[-3000:]
    step = int(stopped[0])
    assert 3 <= step < 150
    # 128 + SIGTERM; torchrun itself exits 1 after its workers (its own SignalException, in torch's code).
    assert run.returncode == (143 if processes == 1 else 1)
    assert not re.search(r'File ".*tra_attn', err), err[-3000:]
    checkpoint = resolve_checkpoint(tmp_path / "stopped")
    assert checkpoint.name == f"step_{step:07d}" and load_train_state(checkpoint)[1]["step"] == step
    launch(tmp_path / "stopped", processes, *flags, "--resume")
    assert max_difference(weights(tmp_path / "straight"), weights(tmp_path / "stopped")) == 0


def test_every_rank_stops_at_the_step_the_run_diverged(tmp_path):
    """lr 1e9: the loss is NaN from step 2 on every rank (DDP averages the NaN gradients); every rank stops at
    the same check, rank 0 says so once, and no checkpoint of non-finite weights exists."""
    flags = ["--steps", "20", "--eval-every", "0", "--log-every", "5", "--checkpoint-every", "5", "--lr", "1e9"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run(command(tmp_path, 2, *flags), capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode != 0
    assert result.stderr.count("tra: error: training diverged at step 2:") == 1, result.stderr[-3000:]
    assert "no checkpoint was written" in result.stderr and not (tmp_path / "checkpoints").exists()


def read_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.is_file() else []


def test_a_two_process_run_resumes_on_one_process(tmp_path):
    flags = ["--steps", "6", "--eval-every", "0", "--checkpoint-every", "3"]
    launch(tmp_path / "one", 1, *flags)
    launch(tmp_path / "moved", 2, *flags)
    remove_checkpoint(tmp_path / "moved", 6)
    launch(tmp_path / "moved", 1, *flags, "--resume")  # the global batch, not the process count, is the config
    assert max_difference(weights(tmp_path / "one"), weights(tmp_path / "moved")) < 1e-6


def remove_checkpoint(run: Path, step: int) -> None:
    shutil.rmtree(run / "checkpoints" / f"step_{step:07d}")


def test_fsdp_matches_one_process_and_resumes_on_any_number_of_processes(tmp_path):
    flags = ["--steps", "6", "--batch-size", "12", "--eval-every", "3", "--checkpoint-every", "3"]
    launch(tmp_path / "one", 1, *flags)
    launch(tmp_path / "fsdp", 2, *flags, "--fsdp")
    checkpoint = tmp_path / "fsdp" / "checkpoints" / "step_0000006"
    assert (checkpoint / "optimizer" / ".metadata").is_file()  # torch.distributed.checkpoint, one shard per rank
    assert sorted(p.name for p in (checkpoint / "optimizer").glob("*.distcp")) == ["__0_0.distcp", "__1_0.distcp"]
    one = weights(tmp_path / "one")
    assert max_difference(one, weights(tmp_path / "fsdp")) < 1e-6
    for processes, extra in ((3, ["--fsdp"]), (1, [])):  # resharded by torch.distributed.checkpoint
        moved = tmp_path / f"on{processes}"
        shutil.copytree(tmp_path / "fsdp", moved)
        remove_checkpoint(moved, 6)
        launch(moved, processes, *flags, *extra, "--resume")
        assert max_difference(one, weights(moved)) < 1e-6


def test_fsdp_errors_name_what_to_do(tmp_path):
    flags = ["--steps", "2", "--eval-every", "0", "--checkpoint-every", "1"]
    alone = subprocess.run(command(tmp_path / "alone", 1, *flags, "--fsdp"), capture_output=True, text=True)
    assert alone.returncode == 2 and "expected a launch by torchrun with --nproc_per_node 2 or more" in alone.stderr
    launch(tmp_path / "ddp", 2, *flags)
    remove_checkpoint(tmp_path / "ddp", 2)
    mixed = subprocess.run(command(tmp_path / "ddp", 2, *flags, "--fsdp", "--resume"), capture_output=True, text=True)
    assert mixed.returncode != 0 and "was written without --fsdp" in mixed.stderr


def test_two_processes_stop_together_when_the_run_fits(tmp_path):
    """Rank 0 alone validates; every rank must stop at its fit step (a rank left training would hang)."""
    flags = ["--steps", "60", "--eval-every", "5", "--checkpoint-every", "60", "--lr", "1e-2", "--fit-accuracy", "0.25"]
    launch(tmp_path / "one", 1, *flags)
    launch(tmp_path / "two", 2, *flags)
    fit = {}
    for run in ("one", "two"):
        rows = [json.loads(line) for line in (tmp_path / run / "metrics.jsonl").read_text().splitlines()]
        fit[run] = [r["fit_step"] for r in rows if "fit_step" in r]
        assert resolve_checkpoint(tmp_path / run).name == f"step_{fit[run][0]:07d}"
    assert fit["one"] == fit["two"] and len(fit["one"]) == 1 and fit["one"][0] < 60


SHARED_UNDER_FSDP = """
import sys, torch, torch.distributed as dist
from tra_attn import ModelConfig, TransformerLM
from tra_attn.training.sharding import full_weights, shard
dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
config = ModelConfig(vocab_size=17, d_model=16, n_heads=4, n_layers=3, attention=sys.argv[1])
alone, model = TransformerLM(config), TransformerLM(config)
model.load_state_dict(alone.state_dict())
(name, _), = [item for item in alone.shared_aliases().items() if item[0].startswith("blocks.1.")][:1]
for m in (alone, model):
    m.get_parameter(name).data[1] = -0.5  # below KERPLE's floor (T5: any value)
shard(model)
assert len(list(model.parameters())) == len(list(alone.parameters()))
ids = torch.randint(0, 17, (4, 12), generator=torch.Generator().manual_seed(1))
optimizers = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (alone, model)]
for step in range(3):
    for m, batch, optimizer in ((alone, ids, optimizers[0]), (model, ids[2 * rank : 2 * rank + 2], optimizers[1])):
        m.set_train_step(step)
        m(batch, labels=batch).mean().backward()
        optimizer.step()
        optimizer.zero_grad()
weights = full_weights(model)
if rank == 0:
    expected = alone.state_dict()
    assert sorted(weights) == sorted(expected), sorted(set(weights) ^ set(expected))
    difference = max((weights[k] - expected[k]).abs().max().item() for k in expected)
    assert difference < 1e-6, difference
    print("same weights")
dist.barrier()  # no rank tears gloo down while the other still runs (a SIGABRT on a loaded machine)
dist.destroy_process_group()
"""


@pytest.mark.parametrize("kind", sharing_kinds())
def test_fsdp_keeps_parameters_shared_across_layers_in_one_group_and_matches_one_process(tmp_path, kind):
    """A parameter the layers share is the model's group's, not each block's (it would become a parameter per block):
    two ranks reach the weights of one process, each shared tensor saved once; KERPLE's in-place clamp reaches the
    stored (sharded) values through the train-step hook, not only the gathered copies the forward sees."""
    script = tmp_path / "shared_under_fsdp.py"
    script.write_text(SHARED_UNDER_FSDP)
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    result = subprocess.run([*launcher, str(script), kind], capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0 and "same weights" in result.stdout, result.stderr[-3000:]
