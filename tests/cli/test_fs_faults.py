"""File-system faults and the command line: a full disk, a read-only folder, a name too long, a path through a
file, a stray WORLD_SIZE/RANK, a torchrun worker failing. Every one is one `tra: error:` line (what was being
written, the path, the reason) and exit 1 (2 for the environment), never a traceback; a failed checkpoint
write keeps the previous checkpoint whole and resumable.

The real faults come from tmpfs mounts (a tiny one that a checkpoint does not fit, one remounted read-only),
which need root: without it those tests skip. Root ignores permission bits, so the faults that work for
any user are a name too long (ENAMETOOLONG) and a path through a regular file (ENOTDIR); a full disk is
also simulated in-process at the lowest write functions (torch.save, safetensors)."""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors import SafetensorError

from tests.cli.test_cli import TINY_TRAIN
from tests.cli.test_cli import run as tra
from tests.training.test_train import assert_same_weights
from tra_attn.training.checkpoint import list_checkpoints, load_train_state, resolve_checkpoint
from tra_attn.training.distributed import join
from tra_attn.utils.os_errors import WriteFailed, describe, os_error, writing

SRC = Path(__file__).resolve().parents[2] / "src"
ONE_ERROR_LINE = re.compile(r"\Atra: error: [^\n]+\n\Z")


@contextlib.contextmanager
def tmpfs(folder: Path, size: str):
    """A real tmpfs of ``size`` at ``folder`` (skips the test where mounting is not permitted)."""
    folder.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], capture_output=True)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        if subprocess.run(["umount", str(folder)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def remount(folder: Path, options: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{options}", str(folder)], check=True)


def cli(*argv, env: dict | None = None, timeout: float = 120) -> subprocess.CompletedProcess:
    """`python -m tra_attn ARGV` in a new process: what a user sees, tracebacks included."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(SRC), **(env or {})}
    argv = [sys.executable, "-m", "tra_attn", *map(str, argv)]
    return subprocess.run(argv, capture_output=True, text=True, env=env, timeout=timeout)


def checkpoint_bytes(run: Path) -> int:
    return sum(f.stat().st_size for f in list_checkpoints(run)[-1].iterdir())


def assert_intact_and_resumable(run: Path, step: int, straight: Path, capsys) -> None:
    """``run``'s checkpoints are exactly ``step`` (no temporary folder left), it loads, and --resume ends at
    the weights of the run that met no fault."""
    assert [p.name for p in (run / "checkpoints").iterdir()] == [f"step_{step:07d}"]
    assert load_train_state(resolve_checkpoint(run))[1]["step"] == step
    code, _, err = tra(["train", "--out", run, *TINY_TRAIN, "--resume"], capsys)
    assert code == 0, err
    assert_same_weights(straight, run)


@pytest.fixture(scope="module")
def straight(tmp_path_factory):
    """The tiny run, trained without a fault (6 steps, checkpoints at 3 and 6)."""
    from tra_attn.cli import main

    run = tmp_path_factory.mktemp("straight") / "run"
    assert main([str(a) for a in ["train", "--out", run, *TINY_TRAIN]]) == 0
    return run


def test_a_full_tmpfs_fails_the_next_checkpoint_in_one_line_and_keeps_the_previous(tmp_path, straight, capsys):
    """A disk with room for one checkpoint: the save at step 6 fails, the one at step 3 stays whole; once
    there is room again, --resume ends where the run without a fault did."""
    size = checkpoint_bytes(straight) * 3 // 2 // 1024 + 8
    with tmpfs(tmp_path / "disk", f"{size}k") as disk:
        code, out, err = tra(["train", "--out", disk / "run", *TINY_TRAIN], capsys)
        assert code == 1 and "trained" not in out
        assert ONE_ERROR_LINE.match(err), err
        assert f"writing checkpoint {disk / 'run' / 'checkpoints' / 'step_0000006'}: No space left on device" in err
        remount(disk, "size=16m")
        assert_intact_and_resumable(disk / "run", 3, straight, capsys)


def test_convert_onto_a_full_tmpfs_is_one_line_and_leaves_nothing(tmp_path, straight, capsys):
    """safetensors' own error (inside transformers' save_pretrained) carries the errno, not the path."""
    pytest.importorskip("transformers")
    with tmpfs(tmp_path / "disk", "8k") as disk:
        code, out, err = tra(["convert", straight, "--to", "hf", "--out", disk / "hf"], capsys)
        assert code == 1 and "wrote" not in out and "Traceback" not in err  # before it: transformers' progress bar
        assert err.splitlines()[-1] == "tra: error: tra convert: No space left on device"
        assert not list(disk.iterdir())


def test_a_read_only_folder_fails_every_command_in_one_line(tmp_path, straight, capsys, monkeypatch):
    with tmpfs(tmp_path / "ro", "16m") as ro:
        shutil.copytree(straight, ro / "run")
        shutil.rmtree(ro / "run" / "checkpoints" / "step_0000006")
        results = Path(__file__).parents[2] / "results"
        shutil.copytree(results / "text_four_seeds", ro / "results" / "text_four_seeds")
        shutil.copytree(results / "runs", ro / "results" / "runs")
        (ro / "text.txt").write_text("It is a truth universally acknowledged. " * 200)
        monkeypatch.setenv("TRA_CACHE_DIR", str(ro / "cache"))
        (ro / "cache").mkdir()
        remount(ro, "ro")
        lm = ["--corpus", ro / "text.txt", "--validation-text", ro / "text.txt", "--steps", "2", "--batch-size", "2"]
        cases = {
            "train --resume": (["train", "--out", ro / "run", *TINY_TRAIN, "--resume"], "metrics log {ro}/run/metrics"),
            "data": (["data", "flipflop", "--num", "4", "--length", "16", "--out", ro / "x.txt"], "sequences {ro}/x"),
            "eval --out": (["eval", "--checkpoint", ro / "run", "--sequences", "8", "--out", ro / "r.jsonl"], "result"),
            "run": (["run", ro / "results" / "text_four_seeds", "--no-train"], "{ro}/results/text_four_seeds/bits_per"),
            "token cache": (
                ["train", "--task", "lm", "--out", tmp_path / "lm", *lm, *TINY_TRAIN[:6]],
                "{ro}/cache/byte-",
            ),
        }
        for name, (argv, written) in cases.items():
            code, _, err = tra(argv, capsys)
            assert code == 1 and ONE_ERROR_LINE.match(err), (name, err)
            assert re.match(rf"tra: error: writing .*{re.escape(written.format(ro=ro))}.*: Read-only file system$", err)
        assert [p.name for p in list_checkpoints(ro / "run")] == ["step_0000003"]
        assert load_train_state(resolve_checkpoint(ro / "run"))[1]["step"] == 3


@contextlib.contextmanager
def immutable(folder: Path):
    """``folder`` made immutable with ``chattr +i`` (binds root too); skips where the file system or user cannot."""
    folder.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["chattr", "+i", str(folder)], capture_output=True)
    if done.returncode != 0:
        pytest.skip(f"cannot make a folder immutable here: {done.stderr.decode().strip()}")
    try:
        yield folder
    finally:
        subprocess.run(["chattr", "-i", str(folder)], capture_output=True)


def test_an_immutable_folder_fails_every_write_in_one_line_as_the_machine_refusing(tmp_path, capsys):
    """`chattr +i`: every write, a new run folder's included, is "Operation not permitted" (EPERM), exit 1 as other
    refusals of the machine (creating a run folder used to be exit 2, as if the input were wrong)."""
    with immutable(tmp_path / "frozen") as frozen:
        cases = {
            "data": (["data", "flipflop", "--num", "4", "--length", "16", "--out", frozen / "x.txt"], "sequences"),
            "train": (["train", "--out", frozen / "run", *TINY_TRAIN], "run directory"),
            "flipflop": (["flipflop", "--preset", "tiny", "--out", frozen / "cmp"], "--out"),
        }
        for name, (argv, what) in cases.items():
            code, _, err = tra(argv, capsys)
            assert code == 1 and ONE_ERROR_LINE.match(err), (name, err)
            assert re.fullmatch(rf"tra: error: writing {what} {frozen}/\S+: Operation not permitted\n", err), err
        assert list(frozen.iterdir()) == []


@pytest.mark.parametrize("where", ["torch.save", "safetensors"])
def test_a_full_disk_while_saving_keeps_the_previous_checkpoint(tmp_path, straight, capsys, monkeypatch, where):
    """The same fault simulated at the lowest writes (works as any user): the file is half written, then the
    write fails as torch and safetensors report it."""
    import tra_attn.models.io as io

    def full(file) -> None:
        """Half a file, then the OS error of a full disk."""
        file.write(b"\0" * 100)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    def torch_save(obj, file, *args, **kwargs):
        try:
            full(file)
        except OSError:  # torch reports a file object's error as its own, with the OSError as context
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534")  # noqa: B904

    def save_file(tensors, path, *args, **kwargs):
        with open(path, "ab") as file, contextlib.suppress(OSError):
            full(file)
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    shutil.copytree(straight, tmp_path / "run")
    shutil.rmtree(tmp_path / "run" / "checkpoints" / "step_0000006")  # the run as it was after step 3
    if where == "torch.save":
        monkeypatch.setattr(torch, "save", torch_save)
    else:
        monkeypatch.setattr(io, "save_file", save_file)
    code, out, err = tra(["train", "--out", tmp_path / "run", *TINY_TRAIN, "--resume"], capsys)
    assert code == 1 and ONE_ERROR_LINE.match(err), err
    step6 = tmp_path / "run" / "checkpoints" / "step_0000006"
    assert err == f"tra: error: writing checkpoint {step6}: No space left on device\n"
    monkeypatch.undo()
    assert_intact_and_resumable(tmp_path / "run", 3, straight, capsys)


def test_over_long_names_and_paths_through_a_file_are_one_line_in_a_new_process(tmp_path):
    """What a user sees (no traceback), for faults that root meets too: a flag's over-long name or path is refused
    by the parser (exit 2); a path the command makes too long below a valid one is a failed write (exit 1)."""
    long = tmp_path / ("x" * 300)
    cases = [
        ["train", "--out", long, *TINY_TRAIN],
        ["data", "flipflop", "--num", "2", "--length", "16", "--out", long],
        ["flipflop", "--preset", "tiny", "--out", tmp_path / "o", "--store", long],
    ]
    for argv in cases:
        result = cli(*argv, timeout=120)
        assert result.returncode == 2 and ONE_ERROR_LINE.match(result.stderr), result.stderr[-3000:]
        assert "is too long; expected names of at most 255 bytes" in result.stderr, result.stderr
    deep = tmp_path.joinpath(*["y" * 200] * ((4090 - len(str(tmp_path))) // 201))  # a valid path near the limit
    result = cli("flipflop", "--preset", "tiny", "--out", tmp_path / "o", "--store", deep, timeout=120)
    assert result.returncode == 1 and ONE_ERROR_LINE.match(result.stderr), result.stderr[-3000:]
    assert result.stderr.rstrip().endswith("File name too long"), result.stderr


def test_the_os_error_behind_a_library_exception():
    enospc = OSError(errno.ENOSPC, "No space left on device")
    try:
        try:
            raise enospc
        except OSError:
            raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 576 vs 534") from None
    except RuntimeError as err:
        assert os_error(err) is None  # `from None`: the context is not the cause
    try:
        try:
            raise enospc
        except OSError:
            raise RuntimeError("unexpected pos 576 vs 534")  # noqa: B904 (torch's C++ does exactly this)
    except RuntimeError as err:
        assert os_error(err) is enospc
    assert os_error(SafetensorError("I/O error: No space left on device (os error 28)")).errno == errno.ENOSPC
    assert os_error(RuntimeError("open file failed with strerror: File name too long")).errno == errno.ENAMETOOLONG
    assert os_error(RuntimeError("shapes do not match")) is None
    assert describe(OSError(errno.EROFS, "Read-only file system", "/a/.b.json.k2_x9abc.tmp")) == (
        "writing /a/b.json: Read-only file system"
    )
    assert describe(OSError(errno.EACCES, "Permission denied", "/a/b")) == "/a/b: Permission denied"
    with (
        pytest.raises(WriteFailed, match=r"^writing rows /x/r\.jsonl: No space left on device$"),
        writing("rows", "/x/r.jsonl"),
    ):
        raise SafetensorError("I/O error: No space left on device (os error 28)")
    with pytest.raises(ValueError, match="refused"), writing("rows", "/x"):
        raise ValueError("refused")


def test_a_bug_keeps_its_traceback(monkeypatch):
    """Only errors of the machine become one line: anything else is a bug, whose traceback is wanted."""
    from tra_attn.cli import main

    def broken(args):
        raise RuntimeError("a bug")

    monkeypatch.setattr("tra_attn.cli.train.cmd_data", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        main(["data", "flipflop", "--num", "1", "--out", "x.txt"])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("rank", ["0", "1"])
def test_a_stray_world_size_fails_within_the_rendezvous_timeout(tmp_path, rank):
    """WORLD_SIZE=2 without torchrun: rank 1 finds no store to connect to, rank 0 no client; neither hangs."""
    env = dict(WORLD_SIZE="2", RANK=rank, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    start = time.monotonic()
    result = cli(
        "train", "--out", tmp_path / "run", *TINY_TRAIN, env={**env, "TRA_RENDEZVOUS_TIMEOUT": "3"}, timeout=60
    )
    assert time.monotonic() - start < 40
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-3000:]
    assert re.search(
        rf"^tra: error: WORLD_SIZE=2 and RANK={rank} are set but no process group formed at 127\.0\.0\.1:\d+ within "
        r"3 s \(TRA_RENDEZVOUS_TIMEOUT\): .+; expected the other processes of a torchrun launch: launch with "
        r"torchrun, or unset WORLD_SIZE, RANK and LOCAL_RANK$",
        result.stderr,
        re.M,
    ), result.stderr[-3000:]
    assert result.stderr.rstrip().splitlines()[-1].startswith("tra: error:")  # after torch's C++ log lines
    waiting = (  # said first, before the wait
        rf"tra: WORLD_SIZE=2 and RANK={rank} are set: waiting up to 3 s \(TRA_RENDEZVOUS_TIMEOUT\) for the other 1 "
        r"process of the run to join at 127\.0\.0\.1:\d+; if no others are coming \(not a torchrun launch\), stop "
        r"this one and unset WORLD_SIZE, RANK and LOCAL_RANK\n"
    )
    assert re.match(waiting, result.stderr), result.stderr[-3000:]


def test_a_stray_world_size_says_what_it_waits_for_at_once(tmp_path):
    """The default timeout is 300 s: the process says, before waiting, what it waits for and how to stop it."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(SRC), "WORLD_SIZE": "3", "RANK": "2"}
    env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()), TRA_RENDEZVOUS_TIMEOUT="300")
    argv = [sys.executable, "-m", "tra_attn", "train", "--out", str(tmp_path / "run"), *TINY_TRAIN]
    process = subprocess.Popen(argv, stderr=subprocess.PIPE, text=True, env=env)
    deadline = threading.Timer(60, process.kill)  # without the line, readline would wait the whole 300 s
    deadline.start()
    try:
        first = process.stderr.readline()
    finally:
        deadline.cancel()
        process.kill()
        process.wait()
    assert first.startswith("tra: WORLD_SIZE=3 and RANK=2 are set: waiting up to 300 s (TRA_RENDEZVOUS_TIMEOUT) for ")
    assert "the other 2 processes of the run to join at 127.0.0.1:" in first and "unset WORLD_SIZE, RANK" in first


@pytest.mark.parametrize(
    "env,message",
    [
        ({"MASTER_ADDR": None}, r"WORLD_SIZE=2 and RANK=1 are set but MASTER_ADDR is not; expected the environment"),
        ({"TRA_RENDEZVOUS_TIMEOUT": "0"}, r"TRA_RENDEZVOUS_TIMEOUT = '0'; expected a positive number of seconds"),
        ({"TRA_RENDEZVOUS_TIMEOUT": "soon"}, r"TRA_RENDEZVOUS_TIMEOUT = 'soon'; expected a positive number"),
    ],
)
def test_a_rendezvous_that_cannot_start_says_why(monkeypatch, env, message):
    for name, value in {"WORLD_SIZE": "2", "RANK": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "1", **env}.items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=message):
        join("cpu")


def torchrun(out: Path, *flags: str) -> subprocess.CompletedProcess:
    launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(SRC)}
    command = [*launcher, "-m", "tra_attn", "train", "--out", str(out), *TINY_TRAIN, *flags]
    return subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed not built")
def test_torchrun_workers_print_the_library_message_first_and_no_traceback_of_the_library(tmp_path):
    """Rank 0 alone writes checkpoints: on a full disk it fails with its line, rank 1 then loses it and says so
    in one line; torchrun's own report (a traceback of torch's code) comes after. A run directory that is a
    file fails every rank with the same line, whole lines that do not interleave."""
    (tmp_path / "file").write_text("")
    result = torchrun(tmp_path / "file")
    line = f"tra: error: run directory {tmp_path / 'file'} is a file; expected a directory (new or existing)"
    assert result.returncode == 1 and result.stderr.splitlines()[:2] == [line, line], result.stderr
    with tmpfs(tmp_path / "disk", "40k") as disk:
        result = torchrun(disk / "run")
        assert result.returncode == 1
        step3 = disk / "run" / "checkpoints" / "step_0000003"
        assert result.stderr.startswith(f"tra: error: writing checkpoint {step3}: No space left on device\n")
        lost = (
            r"^tra: error: process 1 of 2 lost the others \(one of them failed or was stopped: see its own message\): "
        )
        assert re.search(lost, result.stderr, re.M), result.stderr[-3000:]
        assert not re.search(r'File ".*tra_attn', result.stderr), result.stderr[-3000:]
        assert not [p for p in (disk / "run" / "checkpoints").iterdir()]


def test_a_full_disk_under_the_token_cache_names_the_cache_and_the_full_disk(tmp_path, monkeypatch):
    """The token cache's write used to go through ndarray.tofile, which reports a full disk as "1349882 requested
    and 1048576 written" (no errno, no path). Here the write goes to /dev/full, which fails every write with ENOSPC
    for any user; no cache is left."""
    from tra_attn.data.text import corpus

    (tmp_path / "corpus.txt").write_text("some text to tokenize\n" * 60_000)  # 1.3 MB: past stdio's buffers
    real = corpus.atomic_write

    def onto_a_full_disk(path, write):
        real(path, lambda tmp: write(Path("/dev/full")))

    monkeypatch.setattr(corpus, "atomic_write", onto_a_full_disk)
    with pytest.raises(WriteFailed, match=r"^writing token cache .*\.bin: No space left on device$"):
        corpus.tokenize_corpus(tmp_path / "corpus.txt", "byte", cache_dir=tmp_path / "cache", progress=False)
    assert not [p for p in (tmp_path / "cache").iterdir() if p.suffix in (".bin", ".tmp")]


def test_a_full_tmpfs_under_the_token_cache_is_one_line(tmp_path):
    """The same on a real full disk: a 64 KiB tmpfs as TRA_CACHE_DIR and a 1.3 MB corpus."""
    (tmp_path / "corpus.txt").write_text("some text to tokenize\n" * 60_000)
    with tmpfs(tmp_path / "disk", "64k") as disk:
        result = cli(
            "train", "--task", "lm", "--corpus", tmp_path / "corpus.txt", "--validation-text", tmp_path / "corpus.txt",
            "--out", tmp_path / "run", *TINY_TRAIN, env={"TRA_CACHE_DIR": str(disk)},
        )  # fmt: skip
        assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
        last = result.stderr.rstrip().splitlines()[-1]  # after the tokenizing progress bar
        assert re.fullmatch(rf"tra: error: writing token cache {disk}/\S+\.bin: No space left on device", last)
        assert not [p for p in disk.iterdir() if p.suffix == ".bin"]
    assert not (tmp_path / "run").exists()
