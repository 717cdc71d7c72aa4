"""Building, verifying and loading the fused CPU kernels (ops/tra/cpu_build.py): a damaged or foreign library in
the cache is rebuilt or refused in one line, never loaded (a truncated library killed the process with SIGBUS); a
failed build says so in one line that names its log; $CXX is split into words; the instruction set of a build
this CPU lacks is refused; every x86 build this CPU runs passes the kernels' tests; the kernels pass a self test
in C++ here and, where Debian's cross compiler and qemu-user are installed, built for aarch64 under emulation."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tra_attn.ops.tra import cpu_build
from tra_attn.utils.cpu_info import CPUInfo, cpu_info, parse_cpuinfo

pytestmark = pytest.mark.skipif(shutil.which("g++") is None, reason="no C++ compiler here")

# Runs TRA on the kernels in a fresh process and says which library it used.
PROBE = """
import torch
from tra_attn.ops.tra import cpu_build
from tra_attn.ops.tra.fused_cpu import tra_cpu
from tra_attn.ops.tra.contract import KeepRule
found = cpu_build.kernels()
print("library", None if found is None else found.path.name)
if found is not None:
    q = torch.randn(1, 2, 70, 8)
    out = tra_cpu(q, q, q, -torch.rand(1, 2, 70), scale=0.3, keep=KeepRule())
    print("finite", bool(torch.isfinite(out).all()))
"""


def probe(cache: Path, **env) -> subprocess.CompletedProcess:
    environ = {**os.environ, "TRA_CPU_KERNELS_DIR": str(cache), **env}
    for name in ("TRA_CPU_MARCH", "TRA_CPU_CFLAGS", "TRA_CPU_KERNELS"):
        if name not in env:
            environ.pop(name, None)
    return subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=environ, timeout=600)


def built(cache: Path) -> tuple[Path, dict]:
    """The one build folder in ``cache`` and its record."""
    (folder,) = [p for p in cache.iterdir() if p.is_dir()]
    return folder, json.loads((folder / cpu_build.RECORD).read_text())


@pytest.fixture(scope="module")
def cache(tmp_path_factory) -> Path:
    """A cache with one native build in it (each test copies it, so no test builds twice)."""
    root = tmp_path_factory.mktemp("kernels")
    done = probe(root)
    assert done.returncode == 0 and "finite True" in done.stdout, done.stderr
    return root


def copy_of(cache: Path, tmp_path: Path) -> tuple[Path, Path, dict]:
    target = tmp_path / "cache"
    shutil.copytree(cache, target)
    folder, record = built(target)
    return target, folder, record


@pytest.mark.parametrize("damage", ["truncated", "empty", "text", "missing"])
def test_a_damaged_library_is_rebuilt_not_loaded(cache, tmp_path, damage):
    target, folder, record = copy_of(cache, tmp_path)
    library = folder / record["library"]
    data = library.read_bytes()
    if damage == "missing":
        library.unlink()
    else:
        library.write_bytes({"truncated": data[: len(data) // 2], "empty": b"", "text": b"not a library\n"}[damage])
    done = probe(target)
    assert done.returncode == 0, done.stderr  # no SIGBUS (-7)
    assert "finite True" in done.stdout and done.stderr == ""
    _, rebuilt = built(target)
    assert cpu_build.verified_library(folder, rebuilt) is not None and rebuilt["bytes"] == len(data)


def foreign_library(path: Path) -> Path:
    """A valid shared library that is not the kernels."""
    source = path.with_suffix(".cpp")
    source.write_text('extern "C" int something_else() { return 1; }\n')
    subprocess.run(["g++", "-shared", "-fPIC", str(source), "-o", str(path)], check=True)
    source.unlink()
    return path


def test_another_library_in_its_place_or_a_broken_record_is_rebuilt(cache, tmp_path):
    """Another valid shared library at the library's place, its record unchanged: the checksum differs, so it is
    rebuilt; a record that does not parse is rebuilt too."""
    target, folder, record = copy_of(cache, tmp_path)
    foreign_library(folder / record["library"])
    done = probe(target)
    assert "finite True" in done.stdout and done.stderr == "", done.stderr
    (folder / cpu_build.RECORD).write_text("{not json")
    done = probe(target)
    assert "finite True" in done.stdout and done.stderr == "", done.stderr


def test_a_foreign_library_with_a_matching_record_is_refused_in_one_line(cache, tmp_path):
    """A valid shared library that is not the kernels, with a record that matches it (a cache another program
    wrote): one line that names it and says to remove it, the chunked path, no traceback."""
    target, folder, record = copy_of(cache, tmp_path)
    other = foreign_library(folder / "libtra_cpu-0000000000000000.so")
    data = other.read_bytes()
    record.update(library=other.name, bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    (folder / cpu_build.RECORD).write_text(json.dumps(record))
    done = probe(target)
    assert done.returncode == 0 and "library None" in done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "is not a library of the TRA kernels" in lines[0] and "remove it" in lines[0], lines
    assert "Traceback" not in done.stderr


def test_a_failed_build_is_one_line_that_names_its_log(tmp_path):
    """A compiler that prints 200 error lines and fails: one line on stderr naming the log, which holds them."""
    fake = tmp_path / "fake-g++"
    fake.write_text('#!/bin/sh\nif [ "$1" = --version ]; then echo fake 1.0; exit 0; fi\n'
                    'for i in $(seq 200); do echo "x.cpp:$i: error: nothing works" >&2; done\nexit 1\n')  # fmt: skip
    fake.chmod(0o755)
    done = probe(tmp_path / "cache", CXX=str(fake))
    assert done.returncode == 0 and "library None" in done.stdout
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert "exited 1 with 200 error line(s)" in lines[0] and "build.log" in lines[0] and "chunked" in lines[0]
    log = Path(lines[0].split("its output is in ")[1].split(";")[0])
    assert log.read_text().count("error: nothing works") == 200


def test_cxx_is_split_into_words_as_a_shell_does(tmp_path):
    done = probe(tmp_path / "cache", CXX="g++ -Wall")
    assert "finite True" in done.stdout and done.stderr == "", done.stderr
    _, record = built(tmp_path / "cache")
    assert record["flags"][-1] == "-march=native"
    assert "-Wall" in (tmp_path / "cache" / next(iter(os.listdir(tmp_path / "cache"))) / "build.log").read_text()


@pytest.mark.parametrize(
    "env, message",
    [
        ({"TRA_CPU_KERNELS": "yes"}, "TRA_CPU_KERNELS = 'yes'; expected 0 (off), 1 (on) or unset"),
        ({"TRA_CPU_MARCH": "native; rm -rf x"}, "TRA_CPU_MARCH = 'native; rm -rf x'; expected a -march value"),
    ],
)
def test_a_bad_setting_is_a_clear_error(tmp_path, env, message):
    done = probe(tmp_path / "cache", **env)
    assert done.returncode != 0 and message in done.stderr


def test_a_build_for_an_instruction_set_this_cpu_lacks_is_refused(monkeypatch, tmp_path):
    """A library sized for AVX-512 (or AVX2) on a CPU without it would die of SIGILL: it is refused by name."""
    monkeypatch.setenv("TRA_CPU_KERNELS_DIR", str(tmp_path))
    monkeypatch.delenv("TRA_CPU_MARCH", raising=False)
    found = cpu_build.build_and_load(cpu_build.Build(cpu_build.compiler()))
    if found.target not in ("avx512f", "avx2", "neon"):
        pytest.skip(f"this CPU's native build is {found.target}")
    lacking = CPUInfo("test CPU", "", "", cpu_info().machine, frozenset(cpu_info().flags - {found.target}))
    monkeypatch.setattr(cpu_build, "cpu_info", lambda: lacking)
    with pytest.raises(cpu_build.BuildFailed, match=f"is built for {found.target} .*which this CPU lacks"):
        cpu_build.open_library(found.path)


def test_cpu_info_reads_x86_and_aarch64():
    x86 = parse_cpuinfo(
        "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 1\n"
        "model name\t: AMD EPYC 7B13\nflags\t\t: fpu sse2 avx fma avx2\n\nprocessor\t: 1\nflags\t: avx512f\n",
        "x86_64",
    )
    assert x86.instruction_sets == ["avx2", "fma"] and x86.family == "family 25 model 1"
    assert x86.describe() == "AMD EPYC 7B13 (AuthenticAMD, family 25 model 1; x86_64: avx2, fma)"
    arm = parse_cpuinfo("processor\t: 0\nFeatures\t: fp asimd sve\nCPU implementer\t: 0x41\nCPU part\t: 0xd40\n",
                        "aarch64")  # fmt: skip
    assert arm.instruction_sets == ["neon", "sve"] and arm.family == "implementer 0x41 part 0xd40"


X86_BUILDS = {"x86-64-v4": "avx512f", "x86-64-v3": "avx2", "x86-64": "generic"}


@pytest.mark.slow
@pytest.mark.parametrize("march", list(X86_BUILDS))
def test_every_x86_build_this_cpu_runs_passes_the_kernel_tests(tmp_path, march):
    """The kernels' own tests (test_tra_cpu.py: every path against the reference, forward and backward) on the
    AVX-512, AVX2 and generic builds, where this CPU runs them."""
    if cpu_info().machine != "x86_64":
        pytest.skip("an x86-64 CPU")
    target = X86_BUILDS[march]
    if target != "generic" and not cpu_info().has(target):
        pytest.skip(f"this CPU lacks {target}")
    env = {**os.environ, "TRA_CPU_KERNELS_DIR": str(tmp_path), "TRA_CPU_MARCH": march}
    test_file = Path(__file__).with_name("test_tra_cpu.py")
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(test_file)],
                          capture_output=True, text=True, env=env, timeout=1200)  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:]
    assert built(tmp_path)[1]["march"] == march


SELF_TEST = Path(__file__).with_name("cpu_selftest.cpp")


def self_test(cxx: str, march: str, out: Path, *extra: str) -> subprocess.CompletedProcess:
    """Compile cpu_selftest.cpp (the kernels against a materialised reference, no Python) with the kernels'
    flags for ``march``, as an executable."""
    flags = [f for f in cpu_build.Build((cxx,), march).flags if f not in ("-shared", "-fPIC")]
    return subprocess.run([cxx, *flags, *extra, str(SELF_TEST), "-o", str(out)], capture_output=True, text=True,
                          timeout=600)  # fmt: skip


def test_the_self_test_passes_on_this_cpu(tmp_path):
    done = self_test("g++", "native", tmp_path / "selftest")
    assert done.returncode == 0, done.stderr[-3000:]
    ran = subprocess.run([str(tmp_path / "selftest")], capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0 and ran.stdout.count(" ok\n") == 6, ran.stdout


@pytest.mark.skipif(shutil.which("aarch64-linux-gnu-g++") is None, reason="no aarch64 cross compiler here")
def test_the_kernels_build_for_aarch64_and_pass_their_self_test_under_qemu(tmp_path):
    """The NEON build (Debian's g++-aarch64-linux-gnu) compiles as the library and, statically linked, passes the
    self test under qemu-user where qemu-aarch64 is installed."""
    library = tmp_path / "libtra_cpu.so"
    done = subprocess.run(cpu_build.Build(("aarch64-linux-gnu-g++",), "armv8-a").command(library),
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    if shutil.which("qemu-aarch64") is None:
        pytest.skip("built for aarch64; no qemu-aarch64 here to run the self test")
    done = self_test("aarch64-linux-gnu-g++", "armv8-a", tmp_path / "selftest", "-static")
    assert done.returncode == 0, done.stderr[-3000:]
    ran = subprocess.run(["qemu-aarch64", str(tmp_path / "selftest")], capture_output=True, text=True, timeout=600)
    assert ran.returncode == 0 and ran.stdout.count("neon ") == 6 and ran.stdout.count(" ok\n") == 6, ran.stdout
