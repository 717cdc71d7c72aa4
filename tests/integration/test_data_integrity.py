"""Data integrity: each fault delivered for real (a corrupted cache file, a write that raises half-way, a temporary
left by a killed process, a contradicting data file), then the message and that no data was lost."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tests.cli.test_cli import TINY_TRAIN, run
from tra_attn import ModelConfig, TransformerLM
from tra_attn.data import TASKS, absolute_task_args, make_task, recorded_task_args
from tra_attn.data.text.corpus import file_checksum, tokenize_corpus
from tra_attn.models import io as model_io
from tra_attn.training import checkpoint as checkpoint_module
from tra_attn.training.config import TrainConfig
from tra_attn.training.loop import batch_seed
from tra_attn.utils import atomic

TEXT = "It is a truth universally acknowledged, that a single man in possession of a good fortune. " * 20


def dead_pid() -> int:
    """The id of a process that has exited (and been reaped)."""
    process = subprocess.Popen([sys.executable, "-c", "pass"])
    process.wait()
    return process.pid


def temp_name(target: str, pid: int, suffix: str = "tmp") -> str:
    return f".{target}.{pid}@{atomic._HOST}.abc123.{suffix}"


# ---- the token cache -----------------------------------------------------------------------------


def test_a_cache_changed_on_disk_is_rebuilt_never_served(tmp_path, capsys):
    corpus, cache = tmp_path / "corpus.txt", tmp_path / "cache"
    corpus.write_text(TEXT)
    first = tokenize_corpus(corpus, "byte", cache_dir=cache, progress=False)
    expected = first.tokens.tolist()
    meta_path = first.path.with_suffix(".json")
    assert json.loads(meta_path.read_text())["checksum"] == file_checksum(first.path)
    assert not tokenize_corpus(corpus, "byte", cache_dir=cache, progress=False).built

    data = bytearray(first.path.read_bytes())  # ids overwritten in place: same size, same sidecar
    data[10:14] = bytes([0, 0, 0, 0])
    first.path.unlink()
    first.path.write_bytes(data)
    again = tokenize_corpus(corpus, "byte", cache_dir=cache, progress=False)
    assert again.built and again.tokens.tolist() == expected
    assert "do not match the checksum" in capsys.readouterr().err

    meta = json.loads(meta_path.read_text())  # truncated, with the sidecar edited to the new size
    first.path.unlink()
    first.path.write_bytes(bytes(data[: 100 * first.tokens.itemsize]))
    meta_path.write_text(json.dumps({**meta, "length": 100}))
    healed = tokenize_corpus(corpus, "byte", cache_dir=cache, progress=False)
    assert healed.built and healed.tokens.tolist() == expected
    err = capsys.readouterr().err
    assert "do not match the checksum" in err and f"rebuilding it from the corpus {tmp_path}" in err


def test_an_old_cache_without_a_checksum_is_rebuilt_once(tmp_path, capsys):
    corpus, cache = tmp_path / "corpus.txt", tmp_path / "cache"
    corpus.write_text(TEXT)
    first = tokenize_corpus(corpus, "byte", cache_dir=cache, progress=False)
    meta_path = first.path.with_suffix(".json")
    meta = json.loads(meta_path.read_text())
    del meta["checksum"]
    meta_path.write_text(json.dumps(meta))
    again = tokenize_corpus(corpus, "byte", cache_dir=cache, progress=False)
    assert again.built and again.tokens.tolist() == first.tokens.tolist()
    assert "no checksum (written by an older version of tra)" in capsys.readouterr().err
    assert not tokenize_corpus(corpus, "byte", cache_dir=cache, progress=False).built


def test_a_killed_build_leaves_temporaries_that_the_next_build_removes(tmp_path):
    corpus, cache = tmp_path / "corpus.txt", tmp_path / "cache"
    corpus.write_text(TEXT)
    cache.mkdir()
    script = (
        "import os, sys\n"
        "from tra_attn.data.text import corpus\n"
        "from tra_attn.utils.atomic import atomic_write\n"
        "def killed(path, write):\n"
        "    atomic_write(path, lambda tmp: (write(tmp), os._exit(9)))\n"
        "corpus.atomic_write = killed\n"
        f"corpus.tokenize_corpus({str(corpus)!r}, 'byte', cache_dir={str(cache)!r}, progress=False)\n"
    )
    src = Path(__file__).resolve().parents[2] / "src"
    result = subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": str(src)})
    assert result.returncode == 9
    (left,) = [p.name for p in cache.iterdir()]  # the killed process's whole .bin, under a hidden name
    assert left.startswith(".byte-") and left.endswith(".tmp")
    live = cache / temp_name("other.bin", os.getpid())  # a live writer's temporary is never touched
    live.write_bytes(b"x")
    built = tokenize_corpus(corpus, "byte", cache_dir=cache, progress=False)
    assert built.built and len(built) == len(TEXT)
    assert sorted(p.name for p in cache.iterdir()) == sorted([built.path.name, built.path.stem + ".json", live.name])


def test_tra_data_removes_the_temporaries_of_a_killed_write_of_its_file_only(tmp_path, capsys):
    out = tmp_path / "ff.txt"
    stale = tmp_path / temp_name("ff.txt", dead_pid())
    live = tmp_path / temp_name("ff.txt", os.getpid())
    other = tmp_path / temp_name("other.txt", dead_pid())
    foreign = tmp_path / f".ff.txt.{dead_pid()}@another-machine.abc123.tmp"  # a shared file system
    for path in (stale, live, other, foreign):
        path.write_text("half")
    code, _, err = run(["data", "flipflop", "--length", "8", "--num", "3", "--out", out], capsys)
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["ff.txt", live.name, other.name, foreign.name])


# ---- save_pretrained over a saved model ----------------------------------------------------------


def tiny(seed: int, **fields) -> TransformerLM:
    torch.manual_seed(seed)
    return TransformerLM(ModelConfig(vocab_size=12, d_model=16, n_layers=1, n_heads=2, **fields))


def test_a_crash_between_the_weights_and_the_config_leaves_the_old_model_whole(tmp_path, monkeypatch):
    old, new = tiny(0), tiny(1, mlp_ratio=3.0)
    folder = tmp_path / "model"
    old.save_pretrained(folder)
    (folder / "notes.txt").write_text("mine")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}

    def crash(path, text):  # the second write of the pair raises, after the weights were written
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(model_io, "atomic_write_text", crash)
    with pytest.raises(OSError, match="No space left"):
        new.save_pretrained(folder)
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]
    monkeypatch.undo()

    new.save_pretrained(folder)  # a save that completes swaps the whole folder, keeping the other files
    loaded = TransformerLM.from_pretrained(folder)
    assert loaded.config.mlp_ratio == 3.0 and torch.equal(loaded.embed.weight, new.embed.weight)
    assert (folder / "notes.txt").read_text() == "mine"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_a_crash_between_the_two_renames_is_undone_by_the_next_save(tmp_path):
    old, new = tiny(0), tiny(1)
    folder = tmp_path / "model"
    old.save_pretrained(folder)
    aside = tmp_path / temp_name("model", dead_pid(), "old")  # renamed away, then the process was killed
    folder.rename(aside)
    new_half = tmp_path / temp_name("model", dead_pid())
    new_half.mkdir()
    new.save_pretrained(folder)
    assert torch.equal(TransformerLM.from_pretrained(folder).embed.weight, new.embed.weight)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


def test_a_failed_rename_puts_the_old_folder_back(tmp_path, monkeypatch):
    old, new = tiny(0), tiny(1)
    folder = tmp_path / "model"
    old.save_pretrained(folder)

    def refuse(source, destination):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(atomic.os, "rename", refuse)
    with pytest.raises(OSError, match="Input/output"):
        new.save_pretrained(folder)
    monkeypatch.undo()
    assert torch.equal(TransformerLM.from_pretrained(folder).embed.weight, old.embed.weight)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model"]


# ---- tra convert from Hugging Face ---------------------------------------------------------------


@pytest.fixture()
def hf_folder(tmp_path):
    pytest.importorskip("transformers")
    from tra_attn.hf import to_hf

    tiny(0).save_pretrained(tmp_path / "native")
    return to_hf(tmp_path / "native", tmp_path / "hf")


def edit_weights(folder: Path, change) -> None:
    state = load_file(str(folder / "model.safetensors"))
    change(state)
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda s: s.pop("model.norm.weight"), r"missing: \['norm\.weight'\]; unexpected: none"),
        (lambda s: s.update({"model.extra": torch.ones(2)}), r"missing: none; unexpected: \['model\.extra'\]"),
        (
            lambda s: s.update({"model.norm.weight": torch.ones(8)}),
            r"model\.norm\.weight is torch\.float32 of shape \(8,\); expected torch\.float32 of shape \(16,\)",
        ),
        (
            lambda s: s.update({"model.norm.weight": torch.ones(16, dtype=torch.int64)}),
            r"model\.norm\.weight is torch\.int64 of shape \(16,\); expected torch\.float32 .*never cast",
        ),
    ],
)
def test_conversion_refuses_weights_that_are_not_exactly_the_models(hf_folder, tmp_path, capsys, change, message):
    edit_weights(hf_folder, change)
    code, _, err = run(["convert", hf_folder, "--to", "native", "--out", tmp_path / "back"], capsys)
    assert code == 2 and "tra: error: convert:" in err
    assert re.search(message, err), err
    assert not (tmp_path / "back").exists() and sorted(p.name for p in tmp_path.iterdir()) == ["hf", "native"]


def test_conversion_refuses_a_config_value_of_the_wrong_type(hf_folder, tmp_path, capsys):
    config = json.loads((hf_folder / "config.json").read_text())
    (hf_folder / "config.json").write_text(json.dumps({**config, "mlp_ratio": True}))
    code, _, err = run(["convert", hf_folder, "--to", "native", "--out", tmp_path / "back"], capsys)
    assert code == 2 and "ModelConfig.mlp_ratio = True; expected a finite positive number" in err
    (hf_folder / "config.json").write_text(json.dumps({**config, "mlp_bias": 1}))
    code, _, err = run(["convert", hf_folder, "--to", "native", "--out", tmp_path / "back"], capsys)
    assert code == 2 and "ModelConfig.mlp_bias = 1; expected true or false" in err
    assert not (tmp_path / "back").exists()


def test_conversion_follows_the_umask_and_removes_a_killed_conversions_leftovers(hf_folder, tmp_path):
    from tra_attn.hf import to_hf, to_native

    stale = tmp_path / temp_name("back", dead_pid())
    stale.mkdir()
    (stale / "model.safetensors").write_bytes(b"half")
    previous = os.umask(0o027)
    try:
        to_native(hf_folder, tmp_path / "back")
        to_hf(tmp_path / "back", tmp_path / "hf2")
    finally:
        os.umask(previous)
    for folder in (tmp_path / "back", tmp_path / "hf2"):
        assert folder.stat().st_mode & 0o777 == 0o750
        assert {p.stat().st_mode & 0o777 for p in folder.iterdir()} == {0o640}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["back", "hf", "hf2", "native"]
    assert torch.equal(TransformerLM.from_pretrained(tmp_path / "back").embed.weight, tiny(0).embed.weight)


def test_the_wrapper_refuses_ids_outside_the_vocabulary_like_the_native_model():
    pytest.importorskip("transformers")
    from tra_attn.hf import TRAConfig, TRAForCausalLM

    wrapper = TRAForCausalLM(TRAConfig.from_model_config(tiny(0).config))
    with pytest.raises(ValueError, match=r"token ids span \[1, 12\]; expected ids in \[0, 12\)"):
        wrapper(torch.tensor([[1, 2, 12]]))
    with pytest.raises(ValueError, match=r"token ids span \[-1, 2\]"):
        wrapper.generate(torch.tensor([[-1, 2]]), max_new_tokens=2)


# ---- text data files that contradict their task --------------------------------------------------

# For each task: a scored token of a generated sequence and another token of the same kind (a wrong answer).
WRONG_ANSWER = {
    "flipflop": lambda task, t: 9 - t,  # '0' (4) <-> '1' (5)
    "majority": lambda task, t: 7 - t,  # '0' (3) <-> '1' (4)
    "mqar": lambda task, t: task.value0 + (t - task.value0 + 1) % task.num_values,
    "selective_copy": lambda task, t: 2 + (t - 2 + 1) % task.num_symbols,
    "hierarchy": lambda task, t: 32 + (t - 32 + 1) % task.num_values,
    "passkey": lambda task, t: (t + 1) % 10,  # digits '0'-'9' are ids 0-9
    "asentmax_copy": lambda task, t: task.specials.pad,  # the <eos> (the last scored token) replaced
    "asentmax_reverse": lambda task, t: task.specials.pad,
    "asentmax_sort": lambda task, t: task.specials.pad,
    "asentmax_nback": lambda task, t: task.label0 + (t - task.label0 + 1) % task.num_symbols,  # a label
    "asentmax_local_count": lambda task, t: task.specials.pad,  # the <eos> (at the last count) replaced
    "asentmax_mqmtar": lambda task, t: task.specials.pad,  # the <eos> (the last scored token) replaced
    "asentmax_flip_flop": lambda task, t: task.specials.pad,  # the <eos> replaced
    "ruler_niah_single": lambda task, t: (t + 1) % 10,  # a digit of the value (digits are ids 0-9)
    "ruler_niah_multikey": lambda task, t: (t + 1) % 10,
    "ruler_niah_multivalue": lambda task, t: (t + 1) % 10,
    "ruler_niah_multiquery": lambda task, t: (t + 1) % 10,
    "ruler_variable_tracking": lambda task, t: 32 + (t - 32 + 1) % task.num_words,  # another variable (word)
    "ruler_common_words": lambda task, t: 32 + (t - 32 + 1) % task.num_words,  # another word
    "ruler_frequent_words": lambda task, t: 32 + (t - 32 + 1) % task.num_words,
}
LENGTHS = {"flipflop": 32, "majority": 40, "mqar": 48, "selective_copy": 48, "hierarchy": 128, "passkey": 32}
LENGTHS |= {"asentmax_copy": 33, "asentmax_reverse": 33, "asentmax_sort": 33, "asentmax_nback": 33}
LENGTHS |= {"asentmax_local_count": 40, "asentmax_mqmtar": 91, "asentmax_flip_flop": 34}
LENGTHS |= {"ruler_niah_single": 40, "ruler_niah_multikey": 64, "ruler_niah_multivalue": 90}
LENGTHS |= {"ruler_niah_multiquery": 90, "ruler_variable_tracking": 48, "ruler_common_words": 330}
LENGTHS |= {"ruler_frequent_words": 80}


def test_every_task_with_a_text_format_has_a_wrong_answer_case():
    assert sorted(WRONG_ANSWER) == sorted(name for name, cls in TASKS.items() if cls.has_text_format)


@pytest.mark.parametrize("name", sorted(WRONG_ANSWER))
def test_a_data_file_whose_answer_contradicts_the_task_is_refused_naming_the_line(name, tmp_path):
    task = make_task(name, **({"final_read": True} if name == "flipflop" else {}))
    batch = task.sample(3, LENGTHS[name], seed=4)
    path = tmp_path / "data.txt"
    task.write_text(path, batch)
    assert [b.tokens.tolist() for b in task.read_text(path)] == [batch.tokens.tolist()]
    tokens = batch.tokens.clone()
    position = int(batch.loss_mask[1].nonzero()[-1])
    tokens[1, position] = WRONG_ANSWER[name](task, int(tokens[1, position]))
    lines = path.read_text().splitlines()
    lines[1] = task.decode_text(tokens[1])
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=rf"data\.txt:2: {name.replace('flipflop', 'flip-flop')}: "):
        task.read_text(path)


def test_tra_eval_refuses_a_flipflop_file_whose_read_is_not_the_last_write(tmp_path, capsys):
    code, _, err = run(["train", "--task", "flipflop", "--out", tmp_path / "run", *TINY_TRAIN], capsys)
    assert code == 0, err
    (tmp_path / "ff.txt").write_text("w1r1i0r1\nw1i0w0r1\n")
    code, _, err = run(["eval", "--checkpoint", tmp_path / "run", "--data", tmp_path / "ff.txt"], capsys)
    assert code == 2
    assert "ff.txt:2: flip-flop: sequence 'w1i0w0r1': the read at token 6 gives '1'; expected '0', the bit " in err
    assert "written at token 4" in err


# ---- --resume from a checkpoint whose step is not its name ---------------------------------------


def test_resume_refuses_a_checkpoint_whose_stored_step_is_not_its_name(tmp_path, capsys):
    argv = ["train", "--task", "flipflop", "--out", tmp_path / "run", *TINY_TRAIN]
    assert run(argv, capsys)[0] == 0
    latest = tmp_path / "run" / "checkpoints" / "step_0000006"
    state = torch.load(latest / "train_state.pt", weights_only=True)
    torch.save({**state, "step": 3}, latest / "train_state.pt")
    before = {p: p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()}
    code, _, err = run([*argv, "--resume", "--steps", "9"], capsys)
    assert code == 2
    assert "train_state.pt holds step = 3; expected 6, the step its folder is named for" in err
    assert "step_0000003 is intact" in err  # the checkpoint before it
    assert {p: p.read_bytes() for p in (tmp_path / "run").rglob("*") if p.is_file()} == before
    assert checkpoint_module.latest_checkpoint(tmp_path / "run") == latest


# ---- seeds, --fit-accuracy, paths, token dtypes --------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["data", "flipflop", "--num", "2", "--length", "8", "--out", "x.txt", "--seed", str(2**64)],
        ["train", "--task", "flipflop", "--out", "run", "--seed", "-1"],
        ["lm", "sample", "--checkpoint", "run", "--prompt", "a", "--seed", str(2**63)],
        ["flipflop", "--seeds", "0", str(2**70), "--out", "cmp"],
    ],
)
def test_seeds_beyond_64_bits_are_refused_naming_the_flag(argv, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        run(argv, capsys)
    err = capsys.readouterr().err
    assert stop.value.code == 2 and "expected an integer seed in [0, 2**63)" in err
    assert ("--seeds" if "--seeds" in argv else "--seed") in err and list(tmp_path.iterdir()) == []


def test_train_config_seeds_are_checked_and_every_valid_seed_gives_batches():
    with pytest.raises(ValueError, match=r"TrainConfig\.seed = 9223372036854775808; expected an integer seed"):
        TrainConfig(task="flipflop", seed=2**63)
    assert batch_seed(3, 5) == 3 * 1_000_003 + 5  # unchanged for every seed a run has used
    task = make_task("flipflop")
    assert task.sample(2, 8, batch_seed(2**63 - 1, 10)).tokens.shape == (2, 8)


def test_fit_accuracy_out_of_range_is_refused_before_any_work(tmp_path, capsys):
    out = tmp_path / "out"
    code, _, err = run(["train", "--fit-accuracy", "1.5", "--out", out, "--steps", "2"], capsys)
    assert code == 2 and "1.5" in err and "expected a number in [0, 1]" in err
    assert list(tmp_path.iterdir()) == []


def test_training_a_language_model_to_fit_is_refused_before_any_work(tmp_path, capsys):
    """Text has no full-sequence accuracy: `tra train --task lm --fit-accuracy 0.5` was refused at the first
    validation, after training rows and the run folder were written."""
    out = tmp_path / "out"
    command = ["train", "--task", "lm"]
    code, _, err = run([*command, "--fit-accuracy", "0.5", "--out", out, "--steps", "2", "--length", "16"], capsys)
    assert code == 2 and re.fullmatch(
        r"tra: error: --fit-accuracy \(TrainConfig\.fit_accuracy\) = 0\.5: the lm task's validation has no "
        r"full-sequence accuracy to train to fit on; expected no --fit-accuracy, or 0\n",
        err,
    ), err
    assert list(tmp_path.iterdir()) == []


def test_path_task_arguments_are_recorded_absolute(tmp_path, monkeypatch):
    from tra_attn.cli import build_parser
    from tra_attn.cli.train import config_from_args

    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.txt").write_text(TEXT)
    (tmp_path / "data" / "valid.txt").write_text(TEXT)
    args = build_parser().parse_args(
        ["train", "--task", "lm", "--corpus", "data/train.txt", "--validation-text", "data/valid.txt", "--out", "run"]
    )
    config = config_from_args(args)
    assert config.task_args["corpus"] == str(tmp_path / "data" / "train.txt")
    assert config.task_args["validation_text"] == str(tmp_path / "data" / "valid.txt")
    assert absolute_task_args("lm", {"corpus": "austen", "data_dir": "~/c"}) == {
        "corpus": "austen",
        "data_dir": os.path.expanduser("~/c"),
    }
    assert absolute_task_args("flipflop", {"p_ignore": 0.5}) == {"p_ignore": 0.5}


def test_an_old_runs_relative_path_resolves_from_its_folder_or_fails_clearly(tmp_path, monkeypatch):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "train.txt").write_text(TEXT)
    recorded = {"corpus": "data/train.txt", "validation_text": str(tmp_path / "data" / "train.txt")}
    monkeypatch.chdir(tmp_path)
    assert recorded_task_args("lm", recorded, "run/ck")["corpus"] == str(tmp_path / "data" / "train.txt")
    monkeypatch.chdir(tmp_path / "data")
    with pytest.raises(ValueError) as err:
        recorded_task_args("lm", recorded, tmp_path / "run" / "ck")
    message = str(err.value)
    assert "task argument corpus = 'data/train.txt' is a relative path" in message
    assert f"{tmp_path / 'data' / 'data' / 'train.txt'} does not exist" in message
    assert f"task_args.corpus of {tmp_path / 'run' / 'ck' / 'train_config.json'}" in message


def test_a_run_with_a_relative_corpus_evaluates_from_another_folder(tmp_path, monkeypatch, capsys):
    (tmp_path / "work" / "data").mkdir(parents=True)
    (tmp_path / "work" / "data" / "train.txt").write_text(TEXT)
    monkeypatch.setenv("TRA_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path / "work")
    argv = ["train", "--task", "lm", "--corpus", "data/train.txt", "--validation-text", "data/train.txt"]
    argv += ["--out", "run"]
    code, _, err = run([*argv, *TINY_TRAIN], capsys)
    assert code == 0, err
    monkeypatch.chdir(tmp_path)
    code, out, err = run(["lm", "eval", "--checkpoint", "work/run", "--factors", "1"], capsys)
    assert code == 0 and "non_overlapping" in out, err
    code, out, err = run(["eval", "--checkpoint", "work/run", "--sequences", "2"], capsys)
    assert code == 0 and "validation" in out, err


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32])
def test_any_integer_dtype_is_a_batch_of_token_ids(dtype):
    model = tiny(0).eval()
    ids = torch.tensor([[1, 5, 11, 0]])
    assert torch.equal(model(ids.to(dtype)), model(ids))
    out = model.generate(ids.to(dtype), 3, temperature=0)
    assert out.dtype in (torch.int64, torch.int32) and torch.equal(out, model.generate(ids, 3, temperature=0))
    model.check_input_ids(ids.to(dtype))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bool])
def test_token_ids_that_are_not_integers_are_refused(dtype):
    with pytest.raises(ValueError, match=rf"input_ids\.dtype = {dtype}; expected an integer dtype of token ids"):
        tiny(0)(torch.zeros(1, 4, dtype=dtype))


def test_a_uint8_prompt_of_a_large_vocabulary_generates_like_an_int64_one():
    torch.manual_seed(0)
    model = TransformerLM(ModelConfig(vocab_size=400, d_model=16, n_layers=1, n_heads=2)).eval()
    prompt = torch.tensor([[3, 200, 255]])
    out = model.generate(prompt.to(torch.uint8), 30, temperature=0)
    assert out.dtype == torch.int64 and torch.equal(out, model.generate(prompt, 30, temperature=0))


def test_the_cache_checksum_benchmark_runs(tmp_path):
    script = Path(__file__).resolve().parents[2] / "benchmarks" / "cache_checksum.py"
    result = subprocess.run(
        [sys.executable, str(script), "--tokens", "1000000", "--repeats", "1", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(script.parents[1] / "src")},
    )
    assert result.returncode == 0 and "MB/s" in result.stdout, result.stderr
    assert list(tmp_path.iterdir()) == []


# ---- data with nothing to score ----------------------------------------------------------------------


def test_tra_data_refuses_hierarchy_without_gets(tmp_path, capsys):
    """`tra data hierarchy --p-read 0` wrote sequences without a single scored token."""
    code, _, err = run(["data", "hierarchy", "--p-read", "0", "--num", "4", "--out", tmp_path / "h.txt"], capsys)
    assert code == 2 and "hierarchy: p_read = 0.0; expected a probability in (0, 1): the gets' values are" in err
    assert list(tmp_path.iterdir()) == []


FLIPFLOP_WITHOUT_READS = ["--p-ignore", "0.9", "--no-final-read", "--length", "6"]  # seed 0: no 'r' in 3 sequences


def test_every_path_that_hands_out_a_batch_refuses_one_with_nothing_to_score(tmp_path, capsys):
    """The class behind the hierarchy case: `tra data`, training (its fixed validation sequences, or its first
    batch without validation) and evaluation (`--data`) refuse data that hold no scored token, before writing."""
    code, _, err = run(["data", "flipflop", *FLIPFLOP_WITHOUT_READS, "--num", "3", "--out", tmp_path / "f.txt"], capsys)
    assert code == 2 and "tra data flipflop: the 3 sequences of 6 tokens hold no scored token; expected data" in err
    task_args = ["--task-arg", "p_ignore=0.9", "--task-arg", "final_read=false", "--length", "6", "--seed", "0"]
    for validation in (["--eval-sequences", "3"], ["--eval-every", "0"]):
        argv = ["train", "--out", tmp_path / "run", *task_args, "--batch-size", "2", *validation, "--steps", "2"]
        code, _, err = run(argv, capsys)
        what = "validation sequences" if validation[0] == "--eval-sequences" else "first training batch"
        assert code == 2 and re.search(rf"the flipflop task's {what} \(FlipFlop\(.*\)\): the \d sequences? of", err)
    assert list(tmp_path.iterdir()) == []
    run(["train", "--out", tmp_path / "run", *TINY_TRAIN], capsys)
    (tmp_path / "reads.txt").write_text("w1i0i1i0\n")
    code, _, err = run(["eval", "--checkpoint", tmp_path / "run", "--data", tmp_path / "reads.txt", "--out",
                        tmp_path / "rows.jsonl"], capsys)  # fmt: skip
    assert code == 2 and "--data " in err and "the 1 sequence of 8 tokens hold no scored token" in err
    assert not (tmp_path / "rows.jsonl").exists()


# ---- memory -------------------------------------------------------------------------------------------


def test_tra_data_estimates_its_memory_and_refuses_with_the_numbers_under_a_limit(tmp_path):
    """`tra data flipflop --length 100000000` under a memory limit ended in an allocator traceback. A new process
    under `ulimit -v` (its mapped memory + 1 GB): refused at once with the estimate and the limit, nothing written."""
    import resource

    code = "import tra_attn.cli; print(open('/proc/self/status').read().split('VmSize:')[1].split()[0])"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).parents[2] / "src")}
    mapped = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env).stdout) * 1024
    limit = mapped + (1 << 30)

    def under_the_limit():
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    argv = [sys.executable, "-m", "tra_attn", "data", "flipflop", "--length", "10000000", "--num", "100"]
    argv += ["--out", str(tmp_path / "ff.txt")]
    result = subprocess.run(argv, capture_output=True, text=True, env=env, preexec_fn=under_the_limit, timeout=120)
    assert result.returncode == 2 and re.fullmatch(
        r"tra: error: tra data flipflop: 100 sequences \(--num\) of 10000000 tokens \(--length\): about 64\.0 GB of "
        r"memory needed, and the process's limit \(ulimit -v\) leaves [\d.]+ [MG]B; expected fewer sequences or "
        r"shorter ones \(or several files, with different --seed\)\n",
        result.stderr,
    ), result.stderr[-2000:]
    assert list(tmp_path.iterdir()) == []


def test_an_allocation_the_estimate_missed_is_one_line(tmp_path, capsys, monkeypatch):
    """The backstop: torch's allocator error (and numpy's MemoryError) is one `tra: error:` line, exit 1."""
    from tra_attn.data.synthetic.flipflop import FlipFlop

    def refused(self, num, length, seed):
        raise RuntimeError(
            "[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: can't allocate memory: you tried to "
            "allocate 800000000000 bytes. Error code 12 (Cannot allocate memory)"
        )

    monkeypatch.setattr(FlipFlop, "sample", refused)
    code, _, err = run(["data", "flipflop", "--num", "2", "--out", tmp_path / "ff.txt"], capsys)
    assert code == 1 and re.fullmatch(
        r"tra: error: tra data: out of memory: allocating 800\.0 GB failed \(.+ leaves .+\); expected a smaller job "
        r"\(fewer or shorter sequences, a smaller batch\)\n",
        err,
    ), err
    monkeypatch.setattr(FlipFlop, "sample", lambda *a: (_ for _ in ()).throw(MemoryError("Unable to allocate 7 TiB")))
    code, _, err = run(["data", "flipflop", "--num", "2", "--out", tmp_path / "ff.txt"], capsys)
    assert code == 1 and err.startswith("tra: error: tra data: out of memory: Unable to allocate 7 TiB"), err
