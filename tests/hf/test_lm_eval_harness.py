"""lm-evaluation-harness, the client researchers compare language models with, runs a converted model as it
is: ``lm_eval --model hf --model_args pretrained=DIR,trust_remote_code=True`` on two tiny local tasks (YAML
over a JSONL file, offline), for TRA and FoX. Its log-likelihoods are the library's own loss, and its greedy
generation the library's decoding. Skipped without lm-eval (the ``test`` and ``eval`` extras install it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import torch

pytest.importorskip("transformers")
pytest.importorskip("lm_eval")

from tra_attn import ModelConfig, TransformerLM  # noqa: E402
from tra_attn.data.text import make_tokenizer  # noqa: E402
from tra_attn.hf import hf_tokenizer, to_hf  # noqa: E402

DOCS = [
    {"context": "It is a truth universally", "choices": ["acknowledged", "denied"], "label": 0},
    {"context": "Emma Woodhouse, handsome, clever, and", "choices": ["rich", "poor"], "label": 0},
]

TASKS = """
task: tra_choice
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
  cache_dir: {cache}
test_split: test
output_type: multiple_choice
doc_to_text: "{{{{context}}}}"
doc_to_choice: "{{{{choices}}}}"
doc_to_target: "{{{{label}}}}"
metric_list:
  - metric: acc
---
task: tra_generate
dataset_path: json
dataset_kwargs:
  data_files:
    test: {data}
  cache_dir: {cache}
test_split: test
output_type: generate_until
doc_to_text: "{{{{context}}}}"
doc_to_target: "{{{{choices[label]}}}}"
generation_kwargs:
  until: ["\\n"]
  do_sample: false
  max_gen_toks: 12
metric_list:
  - metric: exact_match
"""


def library_loglikelihood(model: TransformerLM, tokenizer, context: str, continuation: str) -> tuple[float, float]:
    """log p(continuation | context) from the library's own per-token loss, and the tolerance fp32 arithmetic
    can promise for another fp32 computation of it (``fp32_sum_tolerance``)."""
    context_ids, ids = tokenizer.encode(context), tokenizer.encode(context + continuation)
    ids = torch.tensor([ids])
    loss = model(ids[:, :-1], labels=ids[:, 1:])[0, len(context_ids) - 1 :]  # nats per continuation token
    return -loss.double().sum().item(), fp32_sum_tolerance(loss.detach())


def fp32_sum_tolerance(terms: torch.Tensor) -> float:
    """How far two fp32 computations of ``terms.sum()`` may lie apart: lm-eval sums n token log-probabilities in
    fp32, whose rounding error is at most (n - 1) u sum|x_i| (recursive summation; u = 2^-24, half fp32's
    spacing), and each of its terms comes from another log-softmax than the library's, a few units in the last
    place apart (below u sum|x_i| in all). So 2 n u sum|x_i|: at a sum of 91.5 over 13 tokens, 1.4e-4. The
    fixed abs=1e-5 this replaces sat below fp32's spacing at 91.5 (7.6e-6) plus a term's rounding, and failed
    once by 1.1e-5. A wrong token, mask or offset moves the sum by whole nats."""
    return 2 * terms.numel() * 2.0**-24 * terms.abs().sum().item()


@pytest.mark.slow  # about 13 s of CPU each: lm-eval's import and its index of every built-in task
@pytest.mark.parametrize("kind", ["tra", "fox"])
def test_lm_eval_cli_scores_and_generates_with_the_library_model(kind, tmp_path):
    torch.manual_seed(0)
    tokenizer = make_tokenizer("byte")
    config = ModelConfig(
        vocab_size=256, d_model=32, n_layers=2, n_heads=2, attention=kind, init_std=0.3, tokenizer=tokenizer.describe()
    )
    model = TransformerLM(config).eval()  # far from uniform predictions: the comparison means something
    model.save_pretrained(tmp_path / "native")
    to_hf(tmp_path / "native", tmp_path / "hf")
    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "docs.jsonl").write_text("".join(json.dumps(doc) + "\n" for doc in DOCS))
    for number, text in enumerate(TASKS.split("---")):
        (tasks / f"task{number}.yaml").write_text(text.format(data=tasks / "docs.jsonl", cache=tmp_path / "ds"))
    home = tmp_path / "hf_home"  # transformers copies remote_code.py under it; datasets caches there too
    env = {**os.environ, "HF_HOME": str(home), "HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    argv = [sys.executable, "-m", "lm_eval", "--model", "hf"]
    argv += [
        "--model_args",
        f"pretrained={tmp_path / 'hf'},trust_remote_code=True",
        "--tasks",
        "tra_choice,tra_generate",
    ]
    argv += ["--include_path", str(tasks), "--batch_size", "2", "--device", "cpu"]
    argv += ["--output_path", str(tmp_path / "out"), "--log_samples"]
    result = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]

    def samples(task: str) -> list[dict]:
        (path,) = (tmp_path / "out").rglob(f"samples_{task}_*.jsonl")
        return [json.loads(line) for line in path.read_text().splitlines()]

    choice = samples("tra_choice")  # the CLI's log: each request's arguments and (log-likelihood, is greedy)
    assert len(choice) == len(DOCS)
    for sample in choice:
        for request, response in zip(sample["arguments"].values(), sample["resps"]):
            context, continuation = request["arg_0"], request["arg_1"]
            assert continuation.startswith(" ")  # lm-eval's target delimiter
            expected, tolerance = library_loglikelihood(model, tokenizer, context, continuation)
            assert float(response[0][0]) == pytest.approx(expected, abs=tolerance, rel=0)
    hf = hf_tokenizer("byte")
    for sample in samples("tra_generate"):
        ids = torch.tensor([tokenizer.encode(sample["doc"]["context"])])
        greedy = model.generate(ids, 12, temperature=0)[0, ids.shape[1] :].tolist()
        assert sample["resps"][0][0] == hf.decode(greedy).split("\n")[0]
