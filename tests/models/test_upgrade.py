"""`tra upgrade PATH` (tra_attn/upgrade): every file of an earlier version under PATH is converted in place, and
nothing else; it reports what it converted, converts nothing the second time, resumes an interrupted conversion,
refuses what it cannot read in one line; and what it converted computes what the fixtures computed under the code
that wrote them (0.1 and 0.2, commit f4e8d9f; ModelConfig version 7, commit cf952f5).

The fixtures are copied first: tests/fixtures stays as those versions wrote it."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tra_attn import ATTENTION_KINDS, TransformerLM
from tra_attn.cli import main
from tra_attn.experiments.identity import run_id
from tra_attn.experiments.methods import first_run_options
from tra_attn.experiments.store import RECORD_NAME, Evidence, Record, read_record
from tra_attn.models.config import VERSION as MODEL_VERSION
from tra_attn.models.config import ModelConfig
from tra_attn.models.io import HF_WEIGHTS_PREFIX, WEIGHTS_NAME, read_config
from tra_attn.training import TrainConfig
from tra_attn.training.checkpoint import load_train_state
from tra_attn.training.config import VERSION as TRAIN_VERSION
from tra_attn.upgrade.configs import FLAT_OPTIONS, upgrade_model_config, upgrade_train_config
from tra_attn.upgrade.files import upgrade
from tra_attn.utils.dataclass_io import OldVersion

FIXTURES = Path(__file__).parents[1] / "fixtures"
RUNS = Path(__file__).parents[2] / "results" / "runs"  # the committed run records (current versions)

# The files `tra upgrade` converts in each fixture; every other file stays byte for byte.
CONVERTED = {
    "v0_1_run": [  # a 0.1 run with a checkpoint: configs without a version, flip-flop's parameters top-level
        "checkpoints/step_0000002/config.json",
        "checkpoints/step_0000002/train_config.json",
        "train_config.json",
    ],
    "v0_2_run": [  # a 0.2 run (TrainConfig 5, ModelConfig 6): flat option fields
        "checkpoints/step_0000001/config.json",
        "checkpoints/step_0000001/train_config.json",
        "train_config.json",
    ],
    "v0_2_models": [  # save_pretrained folders of 0.2, and a Hugging Face folder (rope_hf)
        "cope/config.json",
        "rope/config.json",
        "rope_hf/config.json",
        "tra/config.json",
    ],
    "v0_3_ablations": [  # ModelConfig 7, naming the former TRA ablation kinds; tra_keygate_hf: Hugging Face's form
        "tra_keygate/config.json",
        "tra_keygate_hf/config.json",
        "tra_nodistance/config.json",
        "tra_nothreshold/config.json",
    ],
}


def copy(name: str, tmp_path: Path) -> Path:
    return Path(shutil.copytree(FIXTURES / name, tmp_path / name))


def contents(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder``, by its path relative to it."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def tra_upgrade(capsys, *paths) -> tuple[int, list[str], str]:
    """(exit code, stdout lines, stderr) of `tra upgrade PATHS`."""
    code = main(["upgrade", *map(str, paths)])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err


def check_current(path: Path) -> None:
    """``path``, a converted file, reads as the current version (with the strict classes: every field there)."""
    data = json.loads(path.read_text())
    if path.name == "train_config.json":
        assert data["version"] == TRAIN_VERSION and data["model"]["version"] == MODEL_VERSION
        TrainConfig.from_dict(data, where=path)
    else:
        assert "version" not in data if data.get("model_type") == "tra" else data["version"] == MODEL_VERSION
        read_config(path.parent)


@pytest.mark.parametrize("fixture", CONVERTED)
def test_tra_upgrade_converts_exactly_the_files_of_an_earlier_version_and_says_so(fixture, tmp_path, capsys):
    folder = copy(fixture, tmp_path)
    before = contents(folder)
    code, out, err = tra_upgrade(capsys, folder)
    assert (code, err) == (0, "")
    assert sorted(out) == sorted(f"converted {folder / name}" for name in CONVERTED[fixture])
    after = contents(folder)
    assert set(after) == set(before)  # no file added or removed (no temporary file left)
    assert sorted(name for name in before if after[name] != before[name]) == CONVERTED[fixture]
    for name in CONVERTED[fixture]:
        check_current(folder / name)
    # A second time, nothing is left to convert, and nothing is written.
    code, out, err = tra_upgrade(capsys, folder)
    assert (code, out, err) == (0, [f"{folder}: every file is of the current version"], "")
    assert contents(folder) == after


def test_a_converted_checkpoint_holds_the_same_weights_and_training_state(tmp_path):
    """Weights and training state need no conversion: the converted checkpoint holds the bytes it held."""
    run = copy("v0_1_run", tmp_path)
    checkpoint = run / "checkpoints" / "step_0000002"
    with pytest.raises(OldVersion, match=rf"^{checkpoint}/train_config\.json: TrainConfig version 1, written by"):
        load_train_state(checkpoint)
    with pytest.raises(OldVersion, match=rf"^{checkpoint}/config\.json: ModelConfig version 1, written by an e"):
        TransformerLM.from_pretrained(checkpoint)
    upgrade(run)
    saved, state = load_train_state(checkpoint)
    assert saved["version"] == TRAIN_VERSION and state["step"] == 2
    model = TransformerLM.from_pretrained(checkpoint)
    config = TrainConfig.from_dict(json.loads((run / "train_config.json").read_text()))
    assert model.config == config.model == TrainConfig.from_dict(saved).model
    assert config.task_args == {"p_ignore": 0.8, "final_read": True}  # 0.1's top-level task parameters
    stored = load_file(checkpoint / "model.safetensors")
    assert all(torch.equal(model.state_dict()[name], tensor) for name, tensor in stored.items())


def test_a_single_file_and_several_paths(tmp_path, capsys):
    models, run = copy("v0_2_models", tmp_path), copy("v0_2_run", tmp_path)
    one = models / "tra" / "config.json"
    code, out, _ = tra_upgrade(capsys, one)
    assert (code, out) == (0, [f"converted {one}"])
    assert json.loads((models / "rope" / "config.json").read_text())["version"] == 6  # its neighbours untouched
    code, out, _ = tra_upgrade(capsys, one)
    assert (code, out) == (0, [f"{one}: every file is of the current version"])
    train_config = run / "train_config.json"
    code, out, _ = tra_upgrade(capsys, train_config)
    assert (code, out) == (0, [f"converted {train_config}"])
    check_current(train_config)
    code, out, _ = tra_upgrade(capsys, one, run, models / "rope_hf")  # each PATH in turn
    checkpoint = run / "checkpoints" / "step_0000001"
    assert out == [
        f"{one}: every file is of the current version",
        f"converted {checkpoint / 'config.json'}",
        f"converted {checkpoint / 'train_config.json'}",
        f"converted {models / 'rope_hf' / 'config.json'}",
    ]


def test_an_interrupted_conversion_is_resumed_by_running_it_again(tmp_path, capsys, monkeypatch):
    """Each file is replaced whole, one at a time: stopped after one file, the run is half converted (and still
    refused where it is not); run again, it converts the rest, to exactly what one uninterrupted run writes."""
    whole = copy("v0_1_run", tmp_path / "whole")
    upgrade(whole)
    run = copy("v0_1_run", tmp_path)
    checkpoint = run / "checkpoints" / "step_0000002"
    assert upgrade(checkpoint / "train_config.json") == [checkpoint / "train_config.json"]  # stopped after one
    load_train_state(checkpoint)
    with pytest.raises(OldVersion, match=rf"{checkpoint}/config\.json: ModelConfig version 1"):
        TransformerLM.from_pretrained(checkpoint)
    code, out, _ = tra_upgrade(capsys, run)
    assert (code, out) == (0, [f"converted {checkpoint / 'config.json'}", f"converted {run / 'train_config.json'}"])
    assert contents(run) == contents(whole)

    # Stopped while writing the second file (Ctrl-C): the first is converted, the others are as they were.
    from tra_attn.upgrade import files

    run = copy("v0_2_run", tmp_path / "stopped")
    before = contents(run)
    written = []

    def write_then_stop(path, text):
        if written:
            raise KeyboardInterrupt
        written.append(path)
        real_write(path, text)

    real_write = files.atomic_write_text
    monkeypatch.setattr(files, "atomic_write_text", write_then_stop)
    with pytest.raises(KeyboardInterrupt):
        upgrade(run)
    monkeypatch.undo()
    after = contents(run)
    assert set(after) == set(before) and [n for n in before if after[n] != before[n]] == [
        written[0].relative_to(run).as_posix()
    ]
    assert len(upgrade(run)) == 2
    whole = copy("v0_2_run", tmp_path / "whole")
    upgrade(whole)
    assert contents(run) == contents(whole)


@pytest.mark.parametrize(
    "text,why", [("{not json", r"Expecting property name"), (b"\xff\xfe{}", r"'utf-8' codec can't decode")]
)
def test_an_unreadable_json_file_is_a_one_line_error_naming_it(text, why, tmp_path, capsys):
    whole = copy("v0_2_run", tmp_path / "whole")
    upgrade(whole)
    run = copy("v0_2_run", tmp_path)
    bad = run / "checkpoints" / "step_0000001" / "train_config.json"  # cut short, or garbled
    bad.write_bytes(text.encode() if isinstance(text, str) else text)
    for path in (bad, run):
        code, out, err = tra_upgrade(capsys, path)
        assert code == 2 and "Traceback" not in err and len(err.splitlines()) == 1
        assert err.startswith(f"tra: error: {bad}: not valid JSON (") and why in err
        assert err.endswith("); expected a config or a run record\n")
    # Every other file is as it was or converted; put right, the conversion goes on to what one run writes.
    original, converted, now = contents(FIXTURES / "v0_2_run"), contents(whole), contents(run)
    assert all(now[name] in (original[name], converted[name]) for name in now if run / name != bad)
    shutil.copy(FIXTURES / "v0_2_run" / "checkpoints" / "step_0000001" / "train_config.json", bad)
    upgrade(run)
    assert contents(run) == converted


def test_a_path_that_does_not_exist_is_refused(tmp_path, capsys):
    missing = tmp_path / "nowhere"
    code, out, err = tra_upgrade(capsys, missing)
    assert (code, out) == (2, [])
    assert err == f"tra: error: tra upgrade: {missing} does not exist; expected a run, model, store or results folder\n"
    with pytest.raises(ValueError, match=r"tra upgrade: .*nowhere does not exist"):
        upgrade(missing)
    assert not missing.exists()


def test_other_files_are_left_alone(tmp_path, capsys):
    """Files that are not configs or run records: other JSON, another library's config.json, non-JSON files."""
    folder = tmp_path / "mixed"
    folder.mkdir()
    (folder / "notes.json").write_text(json.dumps({"model": {"tra_threshold": 0.5}}))
    (folder / "list.json").write_text("[1, 2]")
    (folder / "other").mkdir()
    (folder / "other" / "config.json").write_text(json.dumps({"model_type": "gpt2", "n_embd": 8}))
    (folder / "weights.bin").write_bytes(b"\x00\x01")
    (folder / "blob.json").write_bytes(b"\xff\xfe\x00binary")
    (folder / "broken.json").write_text("{the user's own notes")
    before = contents(folder)
    left = [f"left alone: {folder / n} (not valid JSON ({why}); not a file of tra)" for n, why in [
        ("blob.json", "'utf-8' codec can't decode byte 0xff in position 0: invalid start byte"),
        ("broken.json", "Expecting property name enclosed in double quotes: line 1 column 2 (char 1)")]]  # fmt: skip
    code, out, err = tra_upgrade(capsys, folder)  # no file of tra: said, not "every file is current"
    assert code == 2 and out == []
    assert (
        err == f"tra: error: tra upgrade: {folder} holds no file of tra (2 file(s) that are not JSON left alone); "
        "expected a run, checkpoint, model, store or results folder, or a config or run record\n"
    )
    assert contents(folder) == before
    for empty in (tmp_path / "empty", tmp_path / "empty" / "sub"):
        empty.mkdir()
        code, _, err = tra_upgrade(capsys, empty)
        assert code == 2 and f"{empty} holds no file of tra; expected a run" in err
    run = copy("v0_1_run", folder)  # beside them, a run of 0.1: converted, the others left alone and named
    code, out, _ = tra_upgrade(capsys, folder)
    assert code == 0 and out[:2] == left
    assert sorted(out[2:]) == sorted(f"converted {p}" for p in run.rglob("*.json")) and len(out) == 5
    assert {k: v for k, v in contents(folder).items() if not k.startswith("v0_1_run")} == before


CHECKPOINT_CONFIG = "checkpoints/step_0000002/config.json"


@pytest.mark.parametrize("change,message", [
    ({"model": {"attention": "transformer_xl"}}, r"ModelConfig\.attention = 'transformer_xl'; expected one of"),
    ({"steps": "many"}, r"steps = 'many'"),
])  # fmt: skip
def test_a_file_that_converts_to_no_valid_config_stops_the_upgrade_before_anything_is_written(change, message, tmp_path,
                                                                                              capsys):  # fmt: skip
    """A 0.1 config naming an unknown kind, or with steps = "many", is never stamped current; nor is any other file
    of the folder converted (a folder is converted all or nothing), and the same holds for an unreadable config."""
    run = copy("v0_1_run", tmp_path)
    config = json.loads((run / "train_config.json").read_text())
    model = {**config["model"], **change.pop("model", {})}
    (run / "train_config.json").write_text(json.dumps({**config, **change, "model": model}))
    before = contents(run)
    code, out, err = tra_upgrade(capsys, run)
    assert code == 2 and out == [] and re.search(message, err) and str(run / "train_config.json") in err, err
    assert contents(run) == before
    (run / "train_config.json").write_text("{")  # a file by a name of tra's that is not JSON: refused, not skipped
    code, _, err = tra_upgrade(capsys, run)
    assert code == 2 and f"{run / 'train_config.json'}: not valid JSON" in err
    assert (run / CHECKPOINT_CONFIG).read_bytes() == before[CHECKPOINT_CONFIG]


def test_a_config_json_that_is_no_model_config_is_left_alone(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"editor": "vim"}))
    before = contents(tmp_path)
    with contextlib.suppress(ValueError):  # refusing it, naming the file, would do too
        upgrade(tmp_path)
    assert contents(tmp_path) == before


# The models of the fixtures and the outputs their own code computed, stored beside them.
MODELS = [("v0_2_models", name, name.removesuffix("_hf")) for name in ("tra", "rope", "cope", "rope_hf")]
MODELS += [
    ("v0_3_ablations", name, f"{name.removesuffix('_hf')}/logits")
    for name in ("tra_keygate", "tra_nothreshold", "tra_nodistance", "tra_keygate_hf")
]
STORED = {"v0_2_models": "logits.safetensors", "v0_3_ablations": "outputs.safetensors"}


@pytest.mark.parametrize("fixture,name,key", MODELS, ids=[name for _, name, _ in MODELS])
def test_a_converted_model_computes_what_it_computed_under_the_code_that_wrote_it(fixture, name, key, tmp_path):
    folder = copy(fixture, tmp_path) / name
    with pytest.raises(OldVersion, match=r"`tra upgrade "):
        TransformerLM.from_pretrained(folder)
    assert upgrade(folder) == [folder / "config.json"]
    expected = load_file(FIXTURES / fixture / STORED[fixture])
    model = TransformerLM.from_pretrained(folder).eval()
    prefix = HF_WEIGHTS_PREFIX if name.endswith("_hf") else ""
    stored = {tensor.removeprefix(prefix) for tensor in load_file(folder / WEIGHTS_NAME)}
    assert set(model.state_dict()) == stored  # the same tensors, under the names they were saved with
    with torch.no_grad():
        logits = model(expected["ids"])
    # The same computation; only the order of fp32 sums may differ (another op, another machine's kernels).
    torch.testing.assert_close(logits, expected[key], atol=2e-5, rtol=2e-5)


def test_the_conversions_of_configs_read_every_earlier_version_and_leave_a_current_one_as_it_is():
    model = ModelConfig(attention_options={"local_window": 2}).to_dict()
    assert upgrade_model_config(model) == model
    for version in range(1, MODEL_VERSION):  # a current dict labelled older: every field kept as it is
        assert ModelConfig.from_dict(upgrade_model_config({**model, "version": version})).to_dict() == model
    run = TrainConfig(task="majority", task_args={"num_marked": 3}, model=ModelConfig(vocab_size=5), length=32)
    assert upgrade_train_config(run.to_dict()) == run.to_dict()
    for version in range(1, TRAIN_VERSION):
        assert TrainConfig.from_dict(upgrade_train_config({**run.to_dict(), "version": version})) == run
    for convert, name, current in (
        (upgrade_model_config, "ModelConfig", MODEL_VERSION),
        (upgrade_train_config, "TrainConfig", TRAIN_VERSION),
    ):
        with pytest.raises(ValueError, match=rf"{name}: version = {current + 1}; expected 1 to {current} \(a newer"):
            convert({"version": current + 1})
        with pytest.raises(ValueError, match=rf"{name}: version = 0; expected 1 to {current}"):
            convert({"version": 0})
        with pytest.raises(ValueError, match=rf"{name}: got list; expected a JSON object of fields"):
            convert([])
    assert "rope_base" in FLAT_OPTIONS and FLAT_OPTIONS["tra_local_window"] == "local_window"


# Run records: a record's config of TrainConfig version 6 (the committed records until this version), or of 0.2.


def records(count: int = 6) -> list[Record]:
    """Committed records of different tasks and kinds, each with one evaluation and no retraining, whose options
    0.2 could hold (every option 0.2 did not have at its default) and meant the same then."""
    inverse = {option: name for name, option in FLAT_OPTIONS.items()}
    chosen, seen = [], set()
    for path in sorted(RUNS.glob("*.json")):
        record = read_record(path)
        config, model = record.config, record.config["model"]
        defaults = dataclasses.asdict(ATTENTION_KINDS[model["attention"]].options())
        flat = all(name in inverse or value == defaults[name] for name, value in model["attention_options"].items())
        plain = not record.retrained and len(record.tests) == 1 and config["length_spread"] == 0
        # A kind whose name changed its meaning in version 9 reads as its former configuration from older files.
        plain = plain and not first_run_options(model["attention"], model["attention_options"])
        what = (config["task"], model["attention"])
        if flat and plain and what not in seen:
            chosen.append(record)
            seen.add(what)
        if len(chosen) == count:
            return chosen
    pytest.skip(f"fewer than {count} committed run records in {RUNS}")


def as_0_2(config: dict) -> dict:
    """A current TrainConfig dict as 0.2 wrote it: version 5, no length spread, its model without a version and
    with the options as flat fields."""
    inverse = {option: name for name, option in FLAT_OPTIONS.items()}
    model = {k: v for k, v in config["model"].items() if k not in ("version", "attention_options")}
    model |= {inverse[k]: v for k, v in config["model"]["attention_options"].items() if k in inverse}
    return {**{k: v for k, v in config.items() if k != "length_spread"}, "version": 5, "model": model}


def test_a_folder_of_run_records_is_converted_to_the_records_of_this_version(tmp_path, capsys):
    """An evidence folder (<run>.json) and a run store (<run>/record.json), their configs of TrainConfig version 6
    (as committed until this version) or of 0.2's form: converted, each is the committed record, byte for byte."""
    chosen = records()
    evidence, store = tmp_path / "question" / "runs", tmp_path / "store"
    for i, record in enumerate(chosen):
        old = {**record.config, "version": 6} if i % 2 else as_0_2(record.config)
        old_record = dataclasses.replace(record, config=old)
        evidence.mkdir(parents=True, exist_ok=True)
        (evidence / f"{record.run}.json").write_text(old_record.to_text())
        (store / record.run).mkdir(parents=True)
        (store / record.run / RECORD_NAME).write_text(old_record.to_text())
    for folder, layout in ((evidence, "{run}.json"), (store, "{run}/" + RECORD_NAME)):
        code, out, _ = tra_upgrade(capsys, folder)
        paths = {record.run: folder / layout.format(run=record.run) for record in chosen}
        assert code == 0 and sorted(out) == sorted(f"converted {path}" for path in paths.values())
        for run, path in paths.items():
            assert path.read_text() == (RUNS / f"{run}.json").read_text()
        assert tra_upgrade(capsys, folder)[1] == [f"{folder}: every file is of the current version"]


def test_a_results_folder_of_0_2_becomes_the_run_records_of_its_rows(tmp_path, capsys):
    """0.2 wrote a comparison's rows into its folder (results.jsonl, and sweep.jsonl repeating some), each with its
    run's config inline: `tra upgrade` files them as one record per run in FOLDER/runs, as the store does."""
    chosen = records()
    rows = []
    for record in chosen:
        config = as_0_2(record.config)
        context = {"task": config["task"], "method": config["model"]["attention"], "seed": config["seed"]}
        context |= {"lr": config["lr"], "config": config}
        ((_, evaluated),) = record.tests.items()
        rows += [{**row, **context, "commit": record.commit} for row in record.validation]
        rows += [{**row, **context, "commit": evaluated["commit"]} for row in evaluated["rows"]]
    folder = tmp_path / "results" / "old_comparison"
    folder.mkdir(parents=True)
    (folder / "results.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    (folder / "sweep.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows[::3]))
    code, out, _ = tra_upgrade(capsys, folder)
    runs = Evidence(folder / "runs")
    assert code == 0 and sorted(out) == sorted(f"converted {runs.path(r.run)}" for r in chosen)
    assert runs.runs() == sorted(r.run for r in chosen)
    for record in chosen:
        assert runs.get(record.run) == record
        assert record.run == run_id(TrainConfig.from_dict(runs.get(record.run).config))
    assert tra_upgrade(capsys, folder)[1] == [f"{folder}: every file is of the current version"]
    # 0.1's rows said nothing of their run's config: they cannot be filed under one.
    shutil.copy(FIXTURES / "flipflop_tiny_v0_1.jsonl", tmp_path / "results.jsonl")
    code, _, err = tra_upgrade(capsys, tmp_path)
    assert code == 2 and err == (
        f"tra: error: {tmp_path}: rows without their run's config; expected rows written by 0.2 or later, whose "
        "configs say which run they are\n"
    )


def test_resuming_a_run_of_an_earlier_version_says_to_convert_it(tmp_path, capsys):
    """`tra train --resume` of a 0.2 run: refused naming `tra upgrade` and the file; converted, it resumes."""
    run = copy("v0_2_run", tmp_path)
    flags = ["--task", "flipflop", "--length", 16, "--batch-size", 4, "--steps", 2, "--checkpoint-every", 1]
    flags += ["--eval-every", 0, "--d-model", 16, "--n-heads", 2, "--n-layers", 1, "--tra-local-window", 2]
    flags += ["--tra-gate-bias-init", 1.0, "--lr", 1e-3, "--warmup-steps", 0, "--no-progress"]
    argv = ["train", "--out", run, "--resume", *flags]
    assert main([str(a) for a in argv]) == 2
    err = capsys.readouterr().err
    checkpoint = run / "checkpoints" / "step_0000001"
    assert f"{checkpoint}/train_config.json: TrainConfig version 5, written by an earlier version of tra" in err
    assert f"`tra upgrade {checkpoint}/train_config.json`" in err and len(err.splitlines()) == 1
    upgrade(run)
    assert main([str(a) for a in argv]) == 0
    assert f"trained tra: {run / 'checkpoints' / 'step_0000002'}" in capsys.readouterr().out


def test_resuming_a_run_of_an_earlier_version_is_refused_as_an_earlier_version(tmp_path):
    from tra_attn.training import train

    run = copy("v0_2_run", tmp_path)
    config = TrainConfig.from_dict(upgrade_train_config(json.loads((run / "train_config.json").read_text())))
    with pytest.raises(OldVersion) as refused:
        train(config, run, resume=True, progress=False)
    assert "no earlier one is intact" not in str(refused.value)


def test_tra_train_config_of_an_earlier_version_names_the_command_that_converts_it(tmp_path):
    from tra_attn.cli import build_parser
    from tra_attn.cli.train import config_from_args

    path = tmp_path / "train_config.json"
    shutil.copy(FIXTURES / "v0_2_run" / "train_config.json", path)
    args = build_parser().parse_args(["train", "--config", str(path), "--out", str(tmp_path / "r")])
    with pytest.raises(OldVersion) as refused:
        config_from_args(args)
    assert f"`tra upgrade {path}`" in str(refused.value)


def test_tra_upgrade_converts_the_file_tra_train_config_refuses_whatever_its_name(tmp_path, capsys):
    path = tmp_path / "my_run.json"
    shutil.copy(FIXTURES / "v0_2_run" / "train_config.json", path)
    code, out, _ = tra_upgrade(capsys, path)
    assert (code, out) == (0, [f"converted {path}"])


def test_an_earlier_config_that_lost_a_field_or_holds_one_twice_is_refused_by_name():
    """0.2 wrote every flat option field; a file without one would convert to the option's default, and a file
    mixing 0.2's fields with attention_options would silently take one of the two."""
    v0_2 = json.loads((FIXTURES / "v0_2_models" / "tra" / "config.json").read_text())
    assert ModelConfig.from_dict(upgrade_model_config(v0_2)).attention_options.local_window == 3
    lost = {k: v for k, v in v0_2.items() if k != "tra_local_window"}
    with pytest.raises(ValueError, match=r"ModelConfig version 6 \(tra 0\.2\): missing fields \['tra_local_window'\]"):
        upgrade_model_config(lost)
    rope = {k: v for k, v in v0_2.items() if k != "tra_local_window"} | {"attention": "rope"}
    assert ModelConfig.from_dict(upgrade_model_config(rope)).attention == "rope"  # a field rope never read
    both = v0_2 | {"attention_options": {"local_window": 0}}
    with pytest.raises(ValueError, match=r"\['tra_local_window'\] are given as 0\.2's flat fields and in attention"):
        upgrade_model_config(both)
    v7 = ModelConfig().to_dict() | {"version": 7, "tra_local_window": 3}  # version 7 had no flat fields
    with pytest.raises(ValueError, match=r"ModelConfig: unknown fields \['tra_local_window'\]"):
        ModelConfig.from_dict(upgrade_model_config(v7))


# ModelConfig version 9: a rival's name means its authors' configuration; a config of version 8 or earlier gets the
# option values that say what its kind computed then (what this library first ran: first_run_options).
FORMER_8 = {
    "stickbreaking": {"head_norm": False},
    "asentmax": {"nape": False},
    "ssmax": {"rope": False},
    "t5": {"shared_table": False},
    "kerple": {"shared": False, "clamp": "straight_through"},
}


def as_version_8(config: dict) -> dict:
    """A current model config dict as version 8 wrote it: without the options version 9 added to say what it was."""
    added = first_run_options(config["attention"], config["attention_options"])
    options = {k: v for k, v in config["attention_options"].items() if k not in added}
    return {**config, "version": 8, "attention_options": options}


@pytest.mark.parametrize("kind", [*FORMER_8, "rope", "alibi"])
def test_a_version_8_config_means_what_its_kind_computed_then(kind):
    current = ModelConfig(attention=kind, n_heads=2, d_model=16).to_dict()
    old = as_version_8(current)
    options = upgrade_model_config(old)["attention_options"]
    assert {k: options[k] for k in FORMER_8.get(kind, {})} == FORMER_8.get(kind, {})
    if kind in ("rope", "alibi"):  # plain positions: nothing changed, the defaults stand (and so does the identity)
        assert options == current["attention_options"]
        drawn = ModelConfig(attention=kind, n_heads=2, d_model=16, attention_options={"random_positions": 64})
        drawn = upgrade_model_config(as_version_8(drawn.to_dict()))
        former = {"rope": {"random_per_layer": False}, "alibi": {"random_distances": False}}[kind]
        assert {k: drawn["attention_options"][k] for k in former} == former
    # A current config of any version-9 value is left as it is, whatever version it is labelled with.
    authors = ModelConfig(attention=kind, attention_options={"random_positions": 64} if kind in ("rope", "alibi")
                          else {}).to_dict()  # fmt: skip
    assert upgrade_model_config({**authors, "version": 9}) == authors


def former_record(kind: str, random: bool = False) -> Record:
    """A committed record of ``kind`` as this library first ran it (options its version-9 kind says so with)."""
    for path in sorted(RUNS.glob("*.json")):
        record = read_record(path)
        model = record.config["model"]
        options = model["attention_options"]
        first_run = first_run_options(model["attention"], options).items() <= options.items()
        if model["attention"] == kind and bool(options.get("random_positions")) == random and first_run:
            return record
    pytest.skip(f"no committed record of {kind} as first run in {RUNS}")


def test_tra_upgrade_moves_a_record_whose_identity_changed_to_its_new_one(tmp_path, capsys):
    """An evidence folder's <run>.json and a store's <run>/ folder of version 8 (a stick-breaking run, a RoPE run
    with randomized positions) become the committed records of version 9, under their new identities."""
    evidence, store = tmp_path / "question" / "runs", tmp_path / "store"
    evidence.mkdir(parents=True)
    chosen = [former_record("stickbreaking"), former_record("rope", random=True)]
    old_ids = []
    for record in chosen:
        config = {**record.config, "model": as_version_8(record.config["model"])}
        defaults = ATTENTION_KINDS[config["model"]["attention"]].options().to_dict()
        read_as_today = {**defaults, **config["model"]["attention_options"]}  # what version 8 hashed: defaults out
        today = {**config, "model": {**config["model"], "version": MODEL_VERSION, "attention_options": read_as_today}}
        old = dataclasses.replace(record, run=run_id(TrainConfig.from_dict(today)), config=config)
        assert old.run != record.run  # version 8's identity is the authors' configuration's today
        old_ids.append(old.run)
        (evidence / f"{old.run}.json").write_text(old.to_text())
        (store / old.run).mkdir(parents=True)
        (store / old.run / RECORD_NAME).write_text(old.to_text())
        (store / old.run / "train_config.json").write_text(json.dumps(config))
    code, out, _ = tra_upgrade(capsys, evidence)
    assert code == 0 and sorted(out) == sorted(f"converted {evidence / f'{r.run}.json'}" for r in chosen)
    assert sorted(p.name for p in evidence.iterdir()) == sorted(f"{r.run}.json" for r in chosen)
    for record in chosen:
        assert (evidence / f"{record.run}.json").read_text() == (RUNS / f"{record.run}.json").read_text()
    code, out, _ = tra_upgrade(capsys, store)
    assert code == 0 and sorted(p.name for p in store.iterdir()) == sorted(r.run for r in chosen)
    assert sorted(out) == sorted(f"converted {store / r.run / name}" for r in chosen
                                 for name in (RECORD_NAME, "train_config.json"))  # fmt: skip
    for record in chosen:
        assert (store / record.run / RECORD_NAME).read_text() == (RUNS / f"{record.run}.json").read_text()
        assert TrainConfig.from_dict(json.loads((store / record.run / "train_config.json").read_text())).to_dict() \
            == record.config  # fmt: skip
    assert tra_upgrade(capsys, store)[1] == [f"{store}: every file is of the current version"]
    # A store folder already at the new identity is refused by name, and nothing is moved.
    again = tmp_path / "again"
    old = store / chosen[0].run
    shutil.copytree(old, again / old_ids[0])
    (again / old_ids[0] / RECORD_NAME).write_text(
        dataclasses.replace(chosen[0], run=old_ids[0], config={**chosen[0].config, "model": as_version_8(
            chosen[0].config["model"])}).to_text())  # fmt: skip
    shutil.copytree(old, again / chosen[0].run)
    code, _, err = tra_upgrade(capsys, again)
    assert code != 0 and f"is run {chosen[0].run} now, and {again / chosen[0].run} exists" in err
    assert (again / old_ids[0]).is_dir()


def test_a_hugging_face_folder_of_version_8_is_converted_to_what_it_computed(tmp_path):
    from tra_attn.hf import TRAConfig

    config = ModelConfig(attention="stickbreaking", n_heads=2, d_model=16, vocab_size=8)
    folder = tmp_path / "hf"
    folder.mkdir()
    data = TRAConfig.from_model_config(config).to_dict()
    data["attention_options"] = {k: v for k, v in data["attention_options"].items() if k != "head_norm"}
    (folder / "config.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"missing options \['head_norm'\].*converted by `tra upgrade PATH`"):
        read_config(folder)
    assert upgrade(folder) == [folder / "config.json"]
    assert read_config(folder)[0].attention_options.head_norm is False


VERSION_10_OPTIONS = {"alibi": "self_offset", "wall": "gate_max", "path": "w_conv_init_std"}


@pytest.mark.parametrize("kind", sorted(VERSION_10_OPTIONS))
def test_a_version_9_config_gains_the_options_of_version_10_at_the_defaults_that_compute_what_it_did(kind, tmp_path):
    """A run record, and a Hugging Face folder, written before the option existed: converted to its default, which
    computes what version 9 did, so the run keeps its identity."""
    from tra_attn.hf import TRAConfig

    name = VERSION_10_OPTIONS[kind]
    current = ModelConfig(attention=kind, n_heads=2, d_model=16, vocab_size=8)
    old = current.to_dict()
    old = {**old, "version": 9, "attention_options": {k: v for k, v in old["attention_options"].items() if k != name}}
    with pytest.raises(
        ValueError, match=rf"version 9, written by an earlier version of tra; expected version {MODEL_VERSION}"
    ):
        ModelConfig.from_dict(old)
    assert upgrade_model_config(old) == current.to_dict()
    train = TrainConfig(model=current, task="flipflop", steps=10)
    record = Record(run_id(train), {**train.to_dict(), "model": old}, "abc1234", [])
    evidence = tmp_path / "runs"
    evidence.mkdir()
    (evidence / f"{record.run}.json").write_text(record.to_text())
    assert upgrade(evidence) == [evidence / f"{record.run}.json"]
    assert read_record(evidence / f"{record.run}.json").config["model"] == current.to_dict()
    folder = tmp_path / "hf"
    folder.mkdir()
    data = TRAConfig.from_model_config(current).to_dict()
    data["attention_options"] = {k: v for k, v in data["attention_options"].items() if k != name}
    (folder / "config.json").write_text(json.dumps(data))
    with pytest.raises(ValueError, match=rf"missing options \['{name}'\]"):
        read_config(folder)
    assert upgrade(folder) == [folder / "config.json"]
    assert read_config(folder)[0] == current
