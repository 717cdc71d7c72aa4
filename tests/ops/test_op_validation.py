"""The op under bad input: every refusal names the argument, shows the value (with its type when it is
not a number) and says what was expected. Non-finite values are not errors (tests/ops/test_nonfinite.py)."""

from __future__ import annotations

import math

import pytest
import torch

from tra_attn import threshold_relative_attention


def inputs(b=1, h=2, sq=5, sk=5, d=8, dtype=torch.float32):
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(b, h, s, d, generator=gen, dtype=dtype) for s in (sq, sk, sk))
    return q, k, v, -torch.rand(b, h, sq, generator=gen)


TENSOR_CASES = [
    (lambda q, k, v, g: (q[0], k, v, g), r"q\.shape = \(2, 5, 8\); expected a 4-d tensor"),
    (lambda q, k, v, g: (q, k[None], v, g), r"k\.shape = \(1, 1, 2, 5, 8\); expected a 4-d tensor"),
    (lambda q, k, v, g: (q, k, v[0, 0], g), r"v\.shape = \(5, 8\); expected a 4-d tensor"),
    (lambda q, k, v, g: (q, k, v, g[0]), r"log_gate\.shape = \(2, 5\); expected a 3-d tensor"),
    (lambda q, k, v, g: (q, k, v, g[..., None]), r"log_gate\.shape = .*expected a 3-d tensor"),
    (lambda q, k, v, g: (q, k, v, 0.0), r"log_gate = float; expected a torch\.Tensor"),
    (lambda q, k, v, g: (None, k, v, g), r"q = NoneType; expected a torch\.Tensor"),
    (lambda q, k, v, g: (q, k.numpy(), v, g), r"k = ndarray; expected a torch\.Tensor"),
    (lambda q, k, v, g: (q.tolist(), k, v, g), r"q = list; expected a torch\.Tensor"),
    (lambda q, k, v, g: (q, k, v.int(), g), r"v\.dtype = torch\.int32; expected one of float64"),
    (lambda q, k, v, g: (q.long(), k, v, g), r"q\.dtype = torch\.int64; expected one of float64"),
    (lambda q, k, v, g: (q.to(torch.complex64), k, v, g), r"q\.dtype = torch\.complex64; expected one of"),
    (lambda q, k, v, g: (q, k, v, g.long()), r"log_gate\.dtype = torch\.int64; expected one of"),
    (lambda q, k, v, g: (q, k, v, g.bool()), r"log_gate\.dtype = torch\.bool"),
    (lambda q, k, v, g: (q, k.half(), v, g), r"q/k/v dtypes = .*float16.*; expected one dtype for q, k and v"),
    (lambda q, k, v, g: (q, k, v.double(), g), r"q/k/v dtypes = .*float64.*; expected one dtype"),
    (lambda q, k, v, g: (q.double(), k, v, g), r"q/k/v dtypes = .*expected one dtype"),
    (
        lambda q, k, v, g: (q[:, :, :, :4].repeat(2, 1, 1, 2), k, v, g),
        r"k\.shape = \(1, 2, 5, 8\); expected .* = \(2, 2",
    ),
    (lambda q, k, v, g: (q, k[:, :1], v[:, :1], g), r"k\.shape = \(1, 1, 5, 8\); expected \(B, H, Sk, D\) = \(1, 2"),
    (lambda q, k, v, g: (q, k[..., :7], v[..., :7], g), r"k\.shape = \(1, 2, 5, 7\); expected \(B, H, Sk, D\)"),
    (lambda q, k, v, g: (q, k[..., :4], v, g), r"k\.shape = \(1, 2, 5, 4\); expected \(B, H, Sk, D\)"),
    (lambda q, k, v, g: (q, k, v[..., :4], g), r"v\.shape = \(1, 2, 5, 4\); expected the shape of k"),
    (lambda q, k, v, g: (q, k, v[:, :, :4], g), r"v\.shape = \(1, 2, 4, 8\); expected the shape of k"),
    (lambda q, k, v, g: (q, k, v[:, :1], g), r"v\.shape = \(1, 1, 5, 8\); expected the shape of k"),
    (lambda q, k, v, g: (q, k, v, g[:, :1]), r"log_gate\.shape = \(1, 1, 5\); expected \(B, H, Sq\) = \(1, 2, 5\)"),
    (lambda q, k, v, g: (q, k, v, g[..., :4]), r"log_gate\.shape = \(1, 2, 4\); expected \(B, H, Sq\)"),
    (lambda q, k, v, g: (q, k, v, g[:, :, :3]), r"log_gate\.shape = \(1, 2, 3\); expected \(B, H, Sq\)"),
    (lambda q, k, v, g: (q, k[:, :, :2], v[:, :, :2], g), r"Sq = 5; expected Sq <= Sk = 2"),
    (lambda q, k, v, g: (q, k[:, :, :3], v[:, :, :3], g), r"Sq = 5; expected Sq <= Sk = 3"),
    (lambda q, k, v, g: (q[..., :0], k[..., :0], v[..., :0], g), r"q\.shape\[-1\] = 0; expected a head dim D >= 1"),
    (lambda q, k, v, g: (q, k, v, g + 0.5), r"log_gate = max 0\.\d+; expected values <= 0"),
    (lambda q, k, v, g: (q, k, v, g.abs() + 0.1), r"log_gate = max .*; expected values <= 0"),
    (lambda q, k, v, g: (q, k, v, g.index_fill(-1, torch.tensor([2]), math.inf)), r"log_gate = max inf; expected"),
    (lambda q, k, v, g: (q, k, v, g.index_fill(-1, torch.tensor([2]), 1e-6)), r"log_gate = max 1e-06; expected"),
]


@pytest.mark.parametrize("mutate,pattern", TENSOR_CASES)
def test_bad_tensors(mutate, pattern):
    with pytest.raises(ValueError, match=rf"threshold_relative_attention: ({pattern})"):
        threshold_relative_attention(*mutate(*inputs()))


OPTION_CASES = [
    ({"impl": "flash"}, r"impl = 'flash'; expected one of \('auto', 'naive', 'chunked', 'cpu', 'triton'\)"),
    ({"impl": None}, r"impl = None; expected one of"),
    ({"impl": "Chunked"}, r"impl = 'Chunked'; expected one of"),
    ({"impl": "cuda"}, r"impl = 'cuda'; expected one of \('auto', 'naive', 'chunked'"),
    ({"scale": 0.0}, r"scale = 0\.0; expected None or a finite positive number"),
    ({"scale": -0.5}, r"scale = -0\.5; expected None or a finite positive number"),
    ({"scale": -1.0}, r"scale = -1\.0; expected None or a finite positive number"),
    ({"scale": math.inf}, r"scale = inf; expected None or a finite positive number"),
    ({"scale": math.nan}, r"scale = nan"),
    ({"scale": "0.1"}, r"scale = '0\.1' \(a str\); expected None or a finite positive number"),
    ({"scale": True}, r"scale = True \(a bool\); expected None or a finite positive number"),
    ({"scale": torch.tensor(0.1)}, r"scale = tensor\(0\.1000\) \(a Tensor\); expected None or a finite"),
    ({"threshold": math.inf}, r"threshold = inf; expected a number below \+inf"),
    ({"threshold": math.nan}, r"threshold = nan; expected a number below \+inf"),
    ({"threshold": None}, r"threshold = None \(a NoneType\); expected a number"),
    ({"threshold": "0"}, r"threshold = '0' \(a str\); expected a number"),
    ({"threshold": [0.0]}, r"threshold = \[0\.0\] \(a list\); expected a number"),
    ({"threshold": False}, r"threshold = False \(a bool\); expected a number"),
    ({"qk_norm_eps": 0.0}, r"qk_norm_eps = 0\.0; expected None or a finite positive number \(the RMS norm's"),
    ({"qk_norm_eps": math.nan}, r"qk_norm_eps = nan; expected None or a finite positive number"),
    ({"qk_norm_eps": True}, r"qk_norm_eps = True \(a bool\); expected None or a finite positive number"),
    ({"prune_tau": 0.0}, r"prune_tau = 0\.0; expected None or a finite positive number"),
    ({"prune_tau": -1}, r"prune_tau = -1; expected None or a finite positive number"),
    ({"prune_tau": math.inf}, r"prune_tau = inf; expected None or a finite positive number"),
    ({"prune_tau": math.nan}, r"prune_tau = nan; expected None or a finite positive number"),
    ({"prune_tau": "10"}, r"prune_tau = '10' \(a str\); expected None or a finite positive number"),
    ({"logit_dropout": 1.0}, r"logit_dropout = 1\.0; expected a probability in \[0, 1\)"),
    ({"logit_dropout": -0.1}, r"logit_dropout = -0\.1; expected a probability in \[0, 1\)"),
    ({"logit_dropout": math.nan}, r"logit_dropout = nan; expected a probability"),
    ({"logit_dropout": None}, r"logit_dropout = None \(a NoneType\); expected a probability"),
    ({"logit_dropout": True}, r"logit_dropout = True \(a bool\); expected a probability"),
    ({"local_window": -1}, r"local_window = -1; expected a non-negative integer \(0: off; w > 0: the w most"),
    ({"local_window": 2.0}, r"local_window = 2\.0; expected a non-negative integer"),
    ({"local_window": True}, r"local_window = True \(a bool\); expected a non-negative integer"),
    ({"sliding_window": -3}, r"sliding_window = -3; expected a non-negative integer \(0: off; w > 0: only the w"),
    ({"sliding_window": "8"}, r"sliding_window = '8' \(a str\); expected a non-negative integer"),
    ({"sliding_window": None}, r"sliding_window = None \(a NoneType\); expected a non-negative integer"),
    ({"dropout_seed": 1.5}, r"dropout_seed = 1\.5; expected None, an integer or a 0-dim integer tensor"),
    ({"dropout_seed": True}, r"dropout_seed = True \(a bool\); expected None, an integer or a 0-dim integer"),
    ({"dropout_seed": "7"}, r"dropout_seed = '7' \(a str\); expected None, an integer"),
    ({"dropout_seed": torch.tensor([7])}, r"dropout_seed = tensor\(\[7\]\) \(a Tensor\); expected None, an"),
    ({"dropout_seed": torch.tensor(7.0)}, r"dropout_seed = tensor\(7\.\) \(a Tensor\); expected None, an"),
    (
        {"impl": "chunked", "prune_tau": 5.0, "logit_dropout": 0.1},
        r"prune_tau = 5\.0; expected None with logit_dropout = 0\.1 for impl='chunked' \(the early exit's bound",
    ),
    (
        {"impl": "chunked", "prune_tau": 5.0, "keep_surrogate": 1.0},
        r"prune_tau = 5\.0; expected None with keep_surrogate = 1\.0 for impl='chunked'",
    ),
]


@pytest.mark.parametrize("kwargs,pattern", OPTION_CASES)
def test_bad_options(kwargs, pattern):
    with pytest.raises(ValueError, match=rf"threshold_relative_attention: {pattern}"):
        threshold_relative_attention(*inputs(), **kwargs)


def test_triton_needs_cuda_or_the_interpreter_and_a_head_dim_up_to_128(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"impl = 'triton'; expected CUDA tensors \(or TRITON_INTERPRET=1"):
            threshold_relative_attention(*inputs(), impl="triton")
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    with pytest.raises(ValueError, match=r"q\.shape\[-1\] = 160; expected a head dim D <= 128 for impl='triton'"):
        threshold_relative_attention(*inputs(d=160), impl="triton")
    with pytest.raises(ValueError, match=r"q\.dtype = torch\.float64; expected float32, bfloat16 or float16 for impl="):
        threshold_relative_attention(*inputs(dtype=torch.float64), impl="triton")


def test_triton_refuses_early_exit_with_dropout_or_the_surrogate(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    pytest.importorskip("triton")
    for option in ({"logit_dropout": 0.2}, {"keep_surrogate": 0.5}):
        name, value = next(iter(option.items()))
        with pytest.raises(
            ValueError, match=rf"prune_tau = 3\.0; expected None with {name} = {value} for impl='triton'"
        ):
            threshold_relative_attention(*inputs(), impl="triton", prune_tau=3.0, **option)


def test_auto_serves_early_exit_with_dropout_on_the_reference_which_does_not_prune():
    q, k, v, g = inputs(sq=9, sk=9)
    options = {"prune_tau": 3.0, "logit_dropout": 0.3, "dropout_seed": 4}
    expected = threshold_relative_attention(q, k, v, g, impl="naive", logit_dropout=0.3, dropout_seed=4)
    assert torch.equal(threshold_relative_attention(q, k, v, g, **options), expected)


def test_validate_inputs_takes_the_options_by_keyword_only_and_returns_the_calls_contract():
    from tra_attn.ops.tra import Documents, KeepRule, TrainingAids
    from tra_attn.ops.tra.dispatch import validate_inputs

    with pytest.raises(TypeError, match="positional"):
        validate_inputs(*inputs(), None, 0.0, "auto")
    call = validate_inputs(*inputs(), local_window=2, sliding_window=3)
    assert call.keep == KeepRule(0.0, local_window=2, sliding_window=3) and call.documents == Documents()
    assert call.aids == TrainingAids() and call.scale == 1 / math.sqrt(8) and call.prune_tau is None


def test_validate_false_skips_only_the_value_check():
    q, k, v, g = inputs()
    out = threshold_relative_attention(q, k, v, g.abs(), validate=False)  # the caller vouches for the gate
    assert out.shape == q.shape
    with pytest.raises(ValueError, match=r"Sq = 5; expected Sq <= Sk = 2"):
        threshold_relative_attention(q, k[:, :, :2], v[:, :, :2], g, validate=False)
