"""The `tra` command under bad input: every refusal exits with status 2 before any work, and its message
names the flag or field, shows the value and says what was expected."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from tests.cli.test_cli import TINY_TRAIN, run
from tra_attn.models.config import VERSION as MODEL_VERSION

FIXTURES = Path(__file__).parents[1] / "fixtures"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from tra_attn.cli import main

    root = tmp_path_factory.mktemp("trained")
    assert main([str(a) for a in ["train", "--out", root / "run", *TINY_TRAIN]]) == 0
    return root / "run"


@pytest.fixture
def tmp(tmp_path, trained):
    shutil.copytree(trained, tmp_path / "run")
    (tmp_path / "a_file").write_text("x")
    (tmp_path / "binary.txt").write_bytes(b"\xff\xfe\x00w1r1")
    (tmp_path / "unknown_field.json").write_text(json.dumps({"epochs": 3}))
    (tmp_path / "newer.json").write_text(json.dumps({"version": 8}))
    (tmp_path / "broken.json").write_text("{not json")
    shutil.copy(FIXTURES / "v0_2_run" / "train_config.json", tmp_path / "v0_2.json")  # TrainConfig version 5
    (tmp_path / "old_model.json").write_text(json.dumps({"version": 7, "model": {"version": 7, "attention": "tra"}}))
    (tmp_path / "model_list.json").write_text(json.dumps({"model": [1]}))
    for folder, text in SPECS.items():
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "spec.py").write_text(text)
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "bad.txt").write_text("w1r1z\n")
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "bad_run").mkdir()
    (tmp_path / "bad_run" / "train_config.json").write_text("{")
    corrupt = tmp_path / "corrupt"  # the run's last checkpoint with its weights cut to 64 bytes
    corrupt.mkdir()
    ckpt = sorted((tmp_path / "run" / "checkpoints").iterdir())[-1]
    for f in ckpt.iterdir():
        data = f.read_bytes()
        (corrupt / f.name).write_bytes(data[:64] if f.name == "model.safetensors" else data)
    return tmp_path


SPECS = {  # question folders whose spec.py is wrong
    "no_spec": "question = None\n",
    "bad_task": "from tra_attn.experiments.methods import Method\nfrom tra_attn.experiments.spec import Question\n"
    "spec = Question('x?', 'sorting', (Method('tra'),), (0,), lrs=(1e-3, 3e-3))\n",
    "bad_seed": "from tra_attn.experiments.methods import Method\nfrom tra_attn.experiments.spec import Question\n"
    "spec = Question('x?', 'majority', (Method('tra'),), (-1,), lrs=(1e-3, 3e-3))\n",
    "twice": "from tra_attn.experiments.methods import Method\nfrom tra_attn.experiments.spec import Question\n"
    "spec = Question('x?', 'majority', (Method('tra'), Method('tra', label='T')), (0,), lrs=(1e-3, 3e-3))\n",
    "no_rate": "from tra_attn.experiments.methods import Method\nfrom tra_attn.experiments.spec import Question\n"
    "spec = Question('x?', 'majority', (Method('tra'),), (0,))\n",
    "no_preset": "from tra_attn.experiments.methods import Method\nfrom tra_attn.experiments.spec import Question\n"
    "spec = Question('x?', 'majority', (Method('tra'),), (0,), lrs=(1e-3, 3e-3), preset='huge')\n",
    "spec_none": "spec = None\n",
    "syntax": "from tra_attn.experiments.spec import Question\nspec = Question('x?',\n",
    "misspelt": "from tra_attn.experiments.methods import Method\n\n"
    "spec = Questoin('x?', 'majority', (Method('tra'),))\n",
    "bad_import": "from tra_attn.experiments.spec import Question, Quest\nspec = None\n",
    "raises": "import json\n\n\nspec = json.loads('{')\n",
    "loads_bad": "from tra_attn.experiments.spec import load_question\n\nspec = load_question('misspelt')\n",
}

CASES = [
    # tra data
    (["data", "flipflop", "--p-ignore", "nan", "--out", "{tmp}/x.txt"], r"--p-ignore: 'nan'; expected a finite"),
    (["data", "flipflop", "--p-ignore", "1", "--out", "{tmp}/x.txt"], r"p_ignore = 1\.0; expected a probability"),
    (["data", "flipflop", "--p-ignore", "1.0", "--out", "{tmp}/x.txt"], r"p_ignore = 1\.0"),
    (["data", "flipflop", "--p-ignore", "-0.2", "--out", "{tmp}/x.txt"], "p_ignore = -0.2"),
    (["data", "flipflop", "--num", "-5", "--out", "{tmp}/x.txt"], r"--num = -5; expected a positive number"),
    (["data", "flipflop", "--num", "0", "--out", "{tmp}/x.txt"], "--num = 0; expected a positive"),
    (["data", "flipflop", "--length", "-2", "--out", "{tmp}/x.txt"], r"length = -2; expected a positive even"),
    (["data", "flipflop", "--length", "9", "--out", "{tmp}/x.txt"], r"length = 9; expected a positive even"),
    (["data", "flipflop", "--length", "7", "--out", "{tmp}/x.txt"], "length = 7"),
    (["data", "flipflop", "--length", "0", "--out", "{tmp}/x.txt"], "length = 0"),
    (["data", "flipflop", "--out", "{tmp}"], "argument --out: '{tmp}' is a folder; expected a file"),
    (["data", "flipflop", "--out", "{tmp}/a_file/x.txt"], r"--out .*a_file/x\.txt: folder .*a_file is a file"),
    (
        ["data", "flipflop", "--out", "{tmp}/a_file/sub/x.txt"],
        r"--out .*x\.txt: folder .*sub: cannot create it \(Not a directory\)",
    ),
    # tra train: config fields
    (["train", "--out", "{tmp}/r", "--steps", "0"], r"TrainConfig\.steps = 0; expected a positive integer"),
    (["train", "--out", "{tmp}/r", "--batch-size", "0"], r"TrainConfig\.batch_size = 0; expected a positive"),
    (["train", "--out", "{tmp}/r", "--batch-size", "4", "--grad-accum", "3"], r"grad_accum = 3; expected a divisor"),
    (["train", "--out", "{tmp}/r", "--lr", "-1"], r"TrainConfig\.lr = -1\.0; expected a number in"),
    (["train", "--out", "{tmp}/r", "--lr", "0"], r"TrainConfig\.lr = 0\.0; expected a number in"),
    (["train", "--out", "{tmp}/r", "--beta2", "1"], r"TrainConfig\.beta2 = 1\.0; expected a number in \[0, 1\)"),
    (["train", "--out", "{tmp}/r", "--grad-clip", "-1"], r"TrainConfig\.grad_clip = -1\.0; expected a number"),
    (["train", "--out", "{tmp}/r", "--warmup-steps", "-1"], r"warmup_steps = -1; expected a non-negative integer"),
    (
        ["train", "--out", "{tmp}/r", "--warmup-steps", "99999999999999999999", "--steps", "2"],
        r"--warmup-steps = 99999999999999999999; expected at most --steps = 2 \(the learning rate would never reach",
    ),
    (["train", "--out", "{tmp}/r", "--eval-sequences", "0"], r"eval_sequences = 0; expected a positive integer"),
    (["train", "--out", "{tmp}/r", "--precision", "fp16"], r"precision = 'fp16'; expected 'fp32' or 'bf16'"),
    (["train", "--out", "{tmp}/r", "--length", "7"], r"length = 7; expected a positive even number"),
    (["train", "--out", "{tmp}/r", "--vocab-size", "3"], r"vocab_size = 3; expected at least the flipflop vocab"),
    (["train", "--out", "{tmp}/r", "--attention", "flash"], r"ModelConfig\.attention = 'flash'; expected one of"),
    (["train", "--out", "{tmp}/r2", "--attention", "mamba"], "ModelConfig.attention = 'mamba'"),
    (["train", "--out", "{tmp}/r", "--block-style", "post"], r"block_style = 'post'; expected 'prenorm' or 'paper'"),
    (["train", "--out", "{tmp}/r", "--dropout", "1"], r"ModelConfig\.dropout = 1\.0; expected a probability"),
    (["train", "--out", "{tmp}/r", "--d-model", "15"], r"ModelConfig\.d_model = 15; expected a multiple of n_heads"),
    (["train", "--out", "{tmp}/r", "--tra-impl", "fast"], r"TRAOptions\.impl = 'fast'; expected one of"),
    (["train", "--out", "{tmp}/r", "--tra-gate", "both"], r"TRAOptions\.gate = 'both'; expected one of"),
    (
        ["train", "--out", "{tmp}/r", "--tra-gate", "key", "--tra-impl", "chunked"],
        r"TRAOptions\.impl = 'chunked' with TRAOptions\.gate = 'key'; expected impl = 'auto'",
    ),
    (
        ["train", "--out", "{tmp}/r", "--tra-threshold=-inf", "--tra-local-window", "2"],
        r"TRAOptions\.local_window = 2 with TRAOptions\.threshold = -inf; expected local_window = 0",
    ),
    (
        ["train", "--out", "{tmp}/r", "--attention", "tra_keygate"],
        r"ModelConfig\.attention = 'tra_keygate'; expected 'tra' with the option gate = 'key'",
    ),
    (["train", "--out", "{tmp}/r", "--tra-gate-bias-init", "nan"], r"--tra-gate-bias-init: 'nan'; expected a finite"),
    (
        ["train", "--out", "{tmp}/r", "--attention", "rope", "--tra-local-window", "4"],
        r"--tra-local-window is an option of tra; the model's attention is 'rope' "
        r"\(its options: --rope-base, --rope-random-positions, --rope-random-positions-at-eval, "
        r"--rope-random-per-layer\)",
    ),
    (
        ["train", "--out", "{tmp}/r", "--attention", "nope", "--cope-max-pos", "4"],
        r"--cope-max-pos is an option of cope; the model's attention is 'nope' \(its options: none\)",
    ),
    # tra train: task arguments, config files, outputs, devices
    (["train", "--out", "{tmp}/r", "--task-arg", "p_ignore=2"], r"p_ignore = 2; expected a probability"),
    (["train", "--out", "{tmp}/r", "--task-arg", "final_read=maybe"], r"final_read = 'maybe'; expected true or false"),
    (["train", "--out", "{tmp}/r2", "--task-arg", "rate=2"], r"unknown arguments \['rate'\]"),
    (["train", "--out", "{tmp}/r", "--p-ignore", "2"], r"p_ignore = 2\.0; expected a probability"),
    (
        ["train", "--out", "{tmp}/r", "--task", "mqar", "--corpus", "austen"],
        r"--corpus is a parameter of lm; the task is 'mqar' \(its parameters: `tra data mqar --help`\)",
    ),
    (["train", "--out", "{tmp}/r", "--config", "{tmp}/unknown_field.json"], r"unknown fields \['epochs'\]"),
    (["train", "--out", "{tmp}/r", "--config", "{tmp}/newer.json"], r"version = 8; expected 7 \(newer files need a "),
    (
        ["train", "--out", "{tmp}/r", "--config", "{tmp}/v0_2.json"],
        r"--config {tmp}/v0_2\.json: TrainConfig version 5, written by an earlier version of tra; expected version 7: "
        r"convert it with `tra upgrade",
    ),
    (
        ["train", "--out", "{tmp}/r", "--config", "{tmp}/old_model.json"],
        r"--config {tmp}/old_model\.json: ModelConfig version 7, written by an earlier version of tra; expected "
        rf"version {MODEL_VERSION}: convert it with `tra upgrade",
    ),
    (
        ["train", "--out", "{tmp}/r", "--config", "{tmp}/model_list.json"],
        r"ModelConfig: got list in --config; expected a JSON",
    ),
    (["train", "--out", "{tmp}/r", "--config", "{tmp}/binary.txt"], r"--config .*binary\.txt is not valid JSON"),
    (["train", "--out", "{tmp}/r", "--config", "{tmp}"], r"argument --config: '.*' is a folder; expected a file"),
    (
        ["train", "--out", "{tmp}/r2", "--config", "{tmp}/missing.json"],
        "--config {tmp}/missing.json does not exist",
    ),
    (["train", "--out", "{tmp}/r2", "--config", "{tmp}/list.json"], "holds a JSON list; expected an object"),
    (["train", "--out", "{tmp}/r2", "--config", "{tmp}/bad.txt"], "--config {tmp}/bad.txt is not valid JSON"),
    (["train", "--out", "{tmp}/run"], r"run already holds checkpoints; pass --resume"),
    (["train", "--out", "{tmp}/run", "--resume", "--lr", "0.5", *TINY_TRAIN], r"config differs .* in \['lr'\]"),
    (["train", "--out", "{tmp}/a_file"], r"run directory .*a_file is a file; expected a directory"),
    (["train", "--out", "{tmp}/empty.txt"], "run directory {tmp}/empty.txt is a file"),
    (["train", "--out", "{tmp}/r", "--device", "tpu"], r"device = 'tpu'; expected 'cpu', 'cuda' or 'cuda:N'"),
    (["train", "--out", "{tmp}/r", "--device", "cuda:x"], r"device = 'cuda:x'; expected 'cpu', 'cuda' or 'cuda:N'"),
    (["train", "--out", "{tmp}/r2", "--device", "bogus"], "device = 'bogus'"),
    # tra eval
    (["eval", "--checkpoint", "{tmp}/run", "--data", "{tmp}/binary.txt"], r"data file .*binary\.txt is not UTF-8"),
    (["eval", "--checkpoint", "{tmp}/run", "--data", "{tmp}/nothing.txt"], r"data file .*nothing\.txt does not exist"),
    (["eval", "--checkpoint", "{tmp}/run", "--data", "{tmp}/empty.txt"], "empty.txt is empty"),
    (["eval", "--checkpoint", "{tmp}/run", "--data", "{tmp}/bad.txt"], "bad.txt:1: flip-flop: malformed"),
    (["eval", "--checkpoint", "{tmp}/run", "--data", "{tmp}"], "argument --data: '{tmp}' is a folder; expected a file"),
    (["eval", "--checkpoint", "{tmp}/run", "--length", "-16"], r"length = -16; expected a positive number"),
    (["eval", "--checkpoint", "{tmp}/run", "--length", "0"], "length = 0; expected a positive number"),
    (["eval", "--checkpoint", "{tmp}/run", "--sequences", "-1"], r"sequences = -1; expected a positive number"),
    (["eval", "--checkpoint", "{tmp}/run", "--sequences", "0"], "sequences = 0; expected a positive number"),
    (["eval", "--checkpoint", "{tmp}/a_file"], r"checkpoint .*a_file not found; expected a checkpoint directory"),
    (["eval", "--checkpoint", "{tmp}/nowhere"], "checkpoint {tmp}/nowhere not found"),
    (["eval", "--checkpoint", "{tmp}/corrupt"], "model.safetensors is corrupt"),
    (["eval", "--checkpoint", "{tmp}/run", "--out", "{tmp}/a_file/rows.jsonl"], r"--out .*: .*a_file is a file"),
    (["eval", "--checkpoint", "{tmp}/run", "--out", "{tmp}"], "argument --out: '{tmp}' is a folder; expected a file"),
    (["eval", "--checkpoint", "{tmp}/run", "--device", "gpu"], r"device = 'gpu'; expected 'cpu', 'cuda' or 'cuda:N'"),
    (["eval", "--checkpoint", "{tmp}/run", "--device", "bogus"], "device = 'bogus'; expected 'cpu', 'cuda'"),
    # tra flipflop and tra run
    (["flipflop", "--seeds", "--out", "{tmp}/ff"], None),  # argparse: --seeds needs at least one value
    (["flipflop", "--seeds", "-1", "--out", "{tmp}/ff"], r"argument --seeds: .*-1"),
    (["flipflop", "--preset", "huge", "--out", "{tmp}/ff"], r"argument --preset: invalid choice: 'huge'"),
    (["flipflop", "--device", "cuda:99", "--out", "{tmp}/ff"], r"argument --device: device = 'cuda:99'"),
    (["run", "{tmp}/spec.py", "--device", "cuda:99", "--store", "{tmp}/st"], r"argument --device: device = 'cuda:99'"),
    (["flipflop", "--preset", "tiny", "--out", "{tmp}/a_file"], r"--out .*a_file is a file; expected a directory"),
    (["flipflop", "--preset", "tiny", "--out", "{tmp}/a_file/ff"], r"--out .*a_file/ff: cannot create it"),
    (["flipflop", "--preset", "tiny", "--store", "{tmp}/a_file", "--out", "{tmp}/ff/new"], r"--store .*a_file is a f"),
    (["run", "{tmp}/bad_task", "--evidence", "{tmp}/a_file"], r"--evidence .*a_file is a file; expected a folder of r"),
    (["flipflop", "--preset", "tiny", "--device", "gpu", "--out", "{tmp}/ff"], r"device = 'gpu'; expected 'cpu'"),
    (["train", "--out", "{tmp}/a_file/r"], r"run directory .*a_file/r: cannot create it \(Not a directory\)"),
    (["run", "{tmp}/nowhere"], r"nowhere: no spec\.py; expected a spec file or a question folder"),
    (["run", "{tmp}/no_spec"], r"no_spec/spec\.py: never sets spec; expected a spec: a Python file that sets spec = "),
    (["run", "{tmp}/spec_none"], r"spec\.py: spec = None; expected the file to set spec = Question\(\.\.\.\)"),
    (["run", "{tmp}/syntax"], r"syntax/spec\.py:2: '\(' was never closed; expected a spec"),
    (["run", "{tmp}/misspelt"], r"misspelt/spec\.py:3: NameError: name 'Questoin' is not defined"),
    (["run", "{tmp}/bad_import"], r"bad_import/spec\.py:1: ImportError: cannot import name 'Quest'"),
    (["run", "{tmp}/raises"], r"raises/spec\.py:4: JSONDecodeError: Expecting property name"),
    (["run", "{tmp}/loads_bad"], r"error: {tmp}/misspelt/spec\.py:3: NameError: name 'Questoin'"),  # the spec it loads
    (["run", "{tmp}/bad.txt"], r"bad\.txt: not a spec \(not a \.py file\); expected a spec: a Python file"),
    (["run", "{tmp}/list.json"], r"list\.json: not a spec \(not a \.py file\)"),
    (["run", "{tmp}/bad_task"], r"Question\.task = 'sorting'; expected a task with an experiment, one of \["),
    (["run", "{tmp}/bad_seed"], r"Question\.seeds = -1; expected an integer seed"),
    (["run", "{tmp}/twice"], r"methods with the same signature .*expected each method once"),
    (["run", "{tmp}/no_rate"], r"TRA: the 'cpu' preset has no learning rate chosen on validation data for it"),
    (["run", "{tmp}/no_preset"], r"Question\.preset = 'huge'; expected one of \['cpu', 'tiny'\] for majority"),
    (["run", "{tmp}/bad_task", "--store", "{tmp}/a_file"], r"--store .*a_file is a file"),
    (["run", "{tmp}/bad_task", "--jobs", "0"], r"argument --jobs: '0'; expected a whole number, at least 1"),
    (["run", "{tmp}/bad_task", "--jobs", "2", "--no-train"], r"--jobs/--executor train runs; expected them without"),
    (["run", "{tmp}/bad_task", "--cluster-option", "nokey"], r"--cluster-option: 'nokey'; expected KEY=VALUE, e\.g\."),
    (["run", "{tmp}/bad_task", "--cluster-option", "mem_gb=4"], r"--cluster-option \['mem_gb'\]: options of a sch"),
    (
        ["run", "{tmp}/bad_task", "--executor", "submitit-local", "--cluster-option", "bogus=1"],
        r"--cluster-option: Parameter 'bogus' need to be prefixed by an executor name",
    ),
    # tra upgrade
    (["upgrade", "{tmp}/nowhere"], r"tra upgrade: {tmp}/nowhere does not exist; expected a run, model, store or "),
    (["upgrade", "{tmp}/broken.json"], r"^tra: error: {tmp}/broken\.json: not valid JSON \(.*\); expected a config"),
    (["upgrade", "{tmp}/bad_run"], r"^tra: error: {tmp}/bad_run/train_config\.json: not valid JSON \(.*\); expected a"),
]


@pytest.mark.parametrize("argv,pattern", CASES, ids=[" ".join(a[:4]) for a, _ in CASES])
def test_bad_command_lines(argv, pattern, tmp, capsys):
    before = {p.relative_to(tmp) for p in tmp.rglob("*")}
    argv = [a.replace("{tmp}", str(tmp)) for a in argv]
    if pattern is None:  # an argparse usage error: exit status 2 and a usage line
        with pytest.raises(SystemExit) as info:
            run(argv, capsys)
        assert info.value.code == 2 and "expected at least one argument" in capsys.readouterr().err
        return
    try:
        code, _, err = run(argv, capsys)
    except SystemExit as stop:  # refused by the parser itself
        code, err = stop.code, capsys.readouterr().err
    assert code == 2 and err.startswith("tra: error: "), err
    assert re.search(pattern.replace("{tmp}", re.escape(str(tmp))), err), err
    assert "Traceback" not in err
    created = {p.relative_to(tmp) for p in tmp.rglob("*")} - before
    assert {str(p) for p in created} <= {"ff", "r"}, created  # at most an empty folder: ff or r, nothing in it
    assert not (tmp / "x.txt").exists()
