"""Logit dropout whose mask is a pure function of (seed, b, h, i, j): every implementation drops the same logits.

A logit (b, h, i, j) (query position i, key position j) is dropped iff ``u(seed, b, h, i, j) < p * 2^32`` for a
32-bit hash u (docs/op_contract.md, section 5, "Logit dropout"):

    key_bh = mix(mix(mix(mix(seed_lo ^ SEED_SALT) ^ seed_hi) ^ b) ^ h)     per (batch, head)
    row_i  = mix(key_bh ^ i)                                             per query position
    col_j  = mix(j ^ KEY_SALT)                                           per key position
    u      = scramble(row_i ^ col_j) ^ 2^31                              per logit

with ``mix`` a full 32-bit avalanche (two multiply-xorshift rounds) and ``scramble`` its first four steps. All
arithmetic is modulo 2^32. The per-logit part is ten 32-bit integer operations, the same in PyTorch (int32
tensors: multiplication keeps the low 32 bits, as the CPU computes it; shifts are made logical with a mask) and
in the Triton kernels (uint32), so a resumed run and every implementation draw the same mask. The seed is a
Python int or a 0-dim integer tensor (on the device: no host synchronisation); None draws one from torch's
generator.
"""

from __future__ import annotations

import torch

M32 = 0xFFFFFFFF
SEED_SALT = 0x9E3779B9
KEY_SALT = 0x85EBCA6B
MUL1 = 0x21F0AAAD
MUL2 = 0x735A2D97
SIGN = 0x80000000


def threshold32(p: float) -> int:
    """p * 2^32 as an integer: a logit is dropped iff its hash u < this (probability p up to 2^-32)."""
    return int(p * 2**32)


def mix(x: torch.Tensor) -> torch.Tensor:
    """A bijective 32-bit avalanche on int64 tensors holding values in [0, 2^32) (products stay below 2^63)."""
    x = x ^ (x >> 16)
    x = (x * MUL1) & M32
    x = x ^ (x >> 15)
    x = (x * MUL2) & M32
    return x ^ (x >> 15)


def seed_tensor(seed, device) -> torch.Tensor:
    """The seed as a 0-dim int64 tensor on ``device``; None draws one from torch's generator of that device."""
    if seed is None:
        return torch.randint(-(2**63), 2**63 - 1, (), dtype=torch.int64, device=device)
    if isinstance(seed, torch.Tensor):
        return seed.to(device=device, dtype=torch.int64).reshape(())
    return torch.tensor((int(seed) + 2**63) % 2**64 - 2**63, dtype=torch.int64, device=device)


def head_keys(seed: torch.Tensor, batch: int, heads: int) -> torch.Tensor:
    """(B, H) int64 keys in [0, 2^32) of every (batch, head) pair."""
    device = seed.device
    lo, hi = seed & M32, (seed >> 32) & M32
    key = mix(mix(lo ^ SEED_SALT) ^ hi)
    b = torch.arange(batch, device=device, dtype=torch.int64)[:, None]
    h = torch.arange(heads, device=device, dtype=torch.int64)[None, :]
    return mix(mix(key ^ b) ^ h)


def row_keys(keys: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """(..., Sq) int32 row keys of the query ``positions`` (Sq,) under ``keys`` (...) int64."""
    return _as_int32(mix(keys[..., None] ^ positions.to(torch.int64)))


def col_keys(positions: torch.Tensor) -> torch.Tensor:
    """(Sk,) int32 keys of the key ``positions``."""
    return _as_int32(mix(positions.to(torch.int64) ^ KEY_SALT))


def _as_int32(x: torch.Tensor) -> torch.Tensor:
    """int64 values in [0, 2^32) as the int32 tensor with the same bits."""
    return (x - ((x >> 31) << 32)).to(torch.int32)


def scrambled(rows: torch.Tensor, cols: torch.Tensor, out: torch.Tensor | None = None, tmp=None) -> torch.Tensor:
    """scramble(row ^ col) as int32 (the bits of the uint32 word) for broadcast int32 ``rows`` and ``cols``.

    ``out`` and ``tmp``: optional int32 scratch of the broadcast shape (the chunked path reuses them)."""
    x = torch.bitwise_xor(rows, cols, out=out)
    tmp = torch.empty_like(x) if tmp is None else tmp
    for step in (16, MUL1, 15, MUL2):
        if step < 32:  # x ^= x >>> step (a logical shift: arithmetic, then the sign copies masked off)
            torch.bitwise_right_shift(x, step, out=tmp).bitwise_and_((1 << (32 - step)) - 1)
            x.bitwise_xor_(tmp)
        else:  # x *= step modulo 2^32 (int32 multiplication keeps the low 32 bits; a uint32 view is 10x slower)
            x.mul_(step)
    return x


def dropped(rows: torch.Tensor, cols: torch.Tensor, p32: int, out: torch.Tensor | None = None, tmp=None):
    """Bool mask u < p32 of the logits whose broadcast int32 row and column keys are ``rows`` and ``cols``."""
    # u = x ^ 2^31 < p32  <=>  x, read as a signed int32, < p32 - 2^31
    return torch.lt(scrambled(rows, cols, out, tmp), p32 - SIGN)


class LogitDropout:
    """The dropout of one call: probability p, the kept logits' factor 1 / (1 - p) and the hash's keys.

    ``rows`` (B, H, Sq) int32 holds the keys of the query positions Sk - Sq .. Sk - 1, ``cols`` (Sk,) those of
    the key positions. ``factors(rows, cols, dtype)`` gives the multiplier of each logit: 0 where dropped,
    1 / (1 - p) (rounded to ``dtype``) where kept, as the reference path (ops/logit_dropout.py) applies it.
    """

    def __init__(self, p: float, seed, batch: int, heads: int, sq: int, sk: int, device):
        self.p, self.p32 = float(p), threshold32(p)
        self.scale = 1.0 / (1.0 - self.p)
        self.seed = seed_tensor(seed, device)
        keys = head_keys(self.seed, batch, heads)
        self.rows = row_keys(keys, torch.arange(sk - sq, sk, device=device))
        self.cols = col_keys(torch.arange(sk, device=device))

    def factors(self, rows: torch.Tensor, cols: torch.Tensor, dtype, out=None, tmp=None) -> torch.Tensor:
        """0 or 1 / (1 - p) per logit, of the broadcast shape of ``rows`` and ``cols``."""
        drop = dropped(rows, cols, self.p32, out, tmp)
        return torch.where(drop, 0.0, torch.tensor(self.scale, dtype=dtype, device=drop.device))
