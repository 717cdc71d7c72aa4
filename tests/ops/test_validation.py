"""Bad input fails early with a ValueError that names the argument, the value and what was expected."""

from __future__ import annotations

import json

import pytest
import torch

from tra_attn import ModelConfig, TransformerLM, threshold_relative_attention


def _ok(b=1, h=2, sq=5, sk=5, d=8):
    return (
        torch.randn(b, h, sq, d),
        torch.randn(b, h, sk, d),
        torch.randn(b, h, sk, d),
        -torch.rand(b, h, sq),
    )


def _call(q, k, v, g, **kw):
    return threshold_relative_attention(q, k, v, g, **kw)


@pytest.mark.parametrize(
    "mutate,pattern",
    [
        (lambda q, k, v, g: (q[0], k, v, g), r"q\.shape = \(2, 5, 8\); expected a 4-d tensor"),
        (lambda q, k, v, g: (q, k, v, g[..., None]), r"log_gate\.shape = .*expected a 3-d tensor"),
        (lambda q, k, v, g: (q, k[..., :4], v, g), r"k\.shape = \(1, 2, 5, 4\); expected \(B, H, Sk, D\)"),
        (lambda q, k, v, g: (q, k, v[:, :1], g), r"v\.shape = \(1, 1, 5, 8\); expected the shape of k"),
        (lambda q, k, v, g: (q, k, v, g[:, :, :3]), r"log_gate\.shape = \(1, 2, 3\); expected \(B, H, Sq\)"),
        (lambda q, k, v, g: (q, k[:, :, :3], v[:, :, :3], g), r"Sq = 5; expected Sq <= Sk = 3"),
        (lambda q, k, v, g: (q, k, v, g.abs() + 0.1), r"log_gate = max .*; expected values <= 0"),
        (lambda q, k, v, g: (q.long(), k, v, g), r"q\.dtype = torch\.int64; expected one of float64"),
        (lambda q, k, v, g: (q, k, v, g.bool()), r"log_gate\.dtype = torch\.bool"),
        (lambda q, k, v, g: (q.double(), k, v, g), r"q/k/v dtypes = .*expected one dtype"),
        (lambda q, k, v, g: (q.tolist(), k, v, g), r"q = list; expected a torch\.Tensor"),
    ],
)
def test_op_rejects_bad_tensors(mutate, pattern):
    with pytest.raises(ValueError, match=pattern):
        _call(*mutate(*_ok()))


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        ({"impl": "cuda"}, r"impl = 'cuda'; expected one of \('auto', 'naive', 'chunked'"),
        ({"scale": -1.0}, r"scale = -1\.0; expected None or a finite positive number"),
        ({"scale": float("nan")}, r"scale = nan"),
        ({"threshold": float("nan")}, r"threshold = nan; expected a number"),
        ({"threshold": "0"}, r"threshold = '0' \(a str\); expected a number"),
    ],
)
def test_op_rejects_bad_options(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        _call(*_ok(), **kwargs)


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        ({"attention": "flash"}, r"ModelConfig\.attention = 'flash'; expected one of \['tra', 'tra_keygate'"),
        ({"d_model": 30, "n_heads": 4}, r"ModelConfig\.d_model = 30; expected a multiple of n_heads = 4"),
        ({"n_heads": 0}, r"ModelConfig\.n_heads = 0; expected a positive integer"),
        ({"block_style": "postnorm"}, r"block_style = 'postnorm'; expected 'prenorm' or 'paper'"),
        ({"dropout": 1.5}, r"dropout = 1\.5; expected a probability"),
        ({"attention_options": {"impl": "fast"}}, r"TRAOptions\.impl = 'fast'"),
        ({"vocab_size": 2.5}, r"vocab_size = 2\.5; expected a positive integer"),
        ({"attention": "rope", "d_model": 12, "n_heads": 4}, r"even head dimension"),
    ],
)
def test_model_config_rejects_bad_values(kwargs, pattern):
    """Refused by ModelConfig itself: its fields, and the registry's checks (the attention kind exists, the
    options are the kind's and it can run them)."""
    with pytest.raises(ValueError, match=pattern):
        TransformerLM(ModelConfig(**kwargs))


def test_model_config_from_dict_rejects_unknown_and_missing_fields(tmp_path):
    with pytest.raises(ValueError, match=r"unknown fields \['n_embd'\]"):
        ModelConfig.from_dict({"n_embd": 64})
    TransformerLM(ModelConfig(vocab_size=11, d_model=16, n_layers=1, n_heads=2)).save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    del saved["attention_options"], saved["block_style"]
    (tmp_path / "config.json").write_text(json.dumps(saved))
    with pytest.raises(ValueError, match=r"missing fields \['attention_options', 'block_style'\]"):
        TransformerLM.from_pretrained(tmp_path)
    assert ModelConfig.from_dict({"d_model": 64}, partial=True).d_model == 64


@pytest.mark.parametrize(
    "ids,pattern",
    [
        (torch.zeros(4, dtype=torch.long), r"input_ids shape = \(4,\); expected a 2-d"),
        (torch.zeros(1, 4), r"input_ids\.dtype = torch\.float32; expected an integer dtype"),
        (torch.tensor([[0, 11]]), r"token ids span \[0, 11\]; expected ids in \[0, 11\)"),
    ],
)
def test_model_rejects_bad_input_ids(ids, pattern):
    """Shape and dtype on every forward; the id range (a host sync) at data boundaries and in generate."""
    model = TransformerLM(ModelConfig(vocab_size=11, d_model=16, n_layers=1, n_heads=2))
    with pytest.raises(ValueError, match=pattern):
        model.check_input_ids(ids)
    with pytest.raises(ValueError, match=pattern):
        model.generate(ids, max_new_tokens=1)
    if "span" not in pattern:
        with pytest.raises(ValueError, match=pattern):
            model(ids)
