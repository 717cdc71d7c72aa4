"""Random bad arguments at every ``tra`` subcommand's parser: each is refused by the parser itself, before any
work, with exit status 2 and one ``tra: error:`` line naming the flag; no traceback, nothing created.

The bad arguments are what a parser can know is wrong: a value its flag's type rejects (not an integer, not a
finite number, a seed outside [0, 2**63), a name no registry holds, a choice not offered), a flag with its value
missing, a flag that does not exist. Values the parser accepts but a command refuses later (a negative step
count, a missing file) are the other tests' business; this one stays at the parser, so it trains nothing and
runs in seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import os
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tra_attn.cli import build_parser, main
from tra_attn.cli.args import device_arg, file_arg, finite_float, path_arg
from tra_attn.cli.train import parse_seed


def leaves(
    parser: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every subcommand that runs something (``("data", "flipflop")``, ``("train",)``, ...) and its parser."""
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found |= leaves(sub, (*path, name))
    return found or {path: parser}


COMMANDS = leaves(build_parser())


def taking_values(parser: argparse.ArgumentParser) -> list[argparse.Action]:
    """The optional flags of ``parser`` that take a value (not --help, not on/off switches)."""
    return [
        a
        for a in parser._actions
        if a.option_strings and a.nargs != 0 and not isinstance(a, argparse.BooleanOptionalAction)
    ]


def _rejects(convert, text: str) -> bool:
    try:
        convert(text)
    except (ValueError, TypeError, argparse.ArgumentTypeError):
        return True
    return False


TEXT = st.text(st.characters(exclude_categories=("Cs",)), max_size=12)
# Values that look like numbers to a reader: the int flags refuse the non-integers, the float flags what
# float() refuses.
NUMBER_LIKE = st.sampled_from(["1e3", "1.0", "0x10", "1,000", "1 000", "+-1", "--1", "1/2", "½", "1e", "2**10", "3."])


def bad_values(action: argparse.Action):
    """A strategy of values ``action``'s type or choices reject, or None if it accepts any text (a path, a name)."""
    kind = action.type
    if action.choices is not None:
        return TEXT.filter(lambda t: t not in action.choices)
    if kind is int:
        return st.one_of(TEXT, NUMBER_LIKE).filter(lambda t: _rejects(int, t))
    if kind is finite_float:
        not_finite = st.sampled_from(["nan", "NaN", "inf", "-inf", "Infinity", "1e999"])
        return st.one_of(not_finite, st.one_of(TEXT, NUMBER_LIKE).filter(lambda t: _rejects(float, t)))
    if kind is parse_seed:
        out_of_range = st.one_of(st.integers(max_value=-1), st.integers(min_value=2**63)).map(str)
        return st.one_of(out_of_range, st.one_of(TEXT, NUMBER_LIKE).filter(lambda t: _rejects(int, t)))
    if hasattr(kind, "registry"):
        return TEXT.filter(lambda t: t not in list(kind.registry()))
    if kind in (path_arg, file_arg):
        too_long = st.one_of(
            st.integers(256, 600).map(lambda n: "x" * n), st.integers(4100, 4400).map(lambda n: ("abc/" * 1100)[:n])
        )
        folders = st.sampled_from([".", "./", os.sep]) if kind is file_arg else st.nothing()
        return st.one_of(st.sampled_from(["", " ", "\t", "  \n"]), too_long, folders)
    if kind is device_arg:
        return st.one_of(st.sampled_from(["", "gpu", "cuda:x", "cpu:0:1", "tpu"]), TEXT).filter(
            lambda t: _rejects(kind, t)
        )
    return None


@st.composite
def bad_argv(draw, command: tuple[str, ...]) -> tuple[list[str], list[str]]:
    """(argv, the flags the error may name) for one bad argument to ``command``."""
    parser = COMMANDS[command]
    actions = taking_values(parser)
    typed = [(a, s) for a in actions if (s := bad_values(a)) is not None]
    kinds = ["unknown flag"] + (["missing value"] if actions else []) + (["bad value"] if typed else [])
    kind = draw(st.sampled_from(kinds))
    if kind == "unknown flag":
        flag = "--zz-" + draw(st.from_regex(r"[a-z][a-z0-9-]{0,15}", fullmatch=True))
        return [*command, flag, "1"], [flag]
    if kind == "missing value":
        action = draw(st.sampled_from(actions))
        flag = draw(st.sampled_from(action.option_strings))
        return [*command, flag], list(action.option_strings)
    action, values = draw(st.sampled_from(typed))
    flag = draw(st.sampled_from(action.option_strings))
    value = draw(values)
    argv = [*command, f"{flag}={value}"] if draw(st.booleans()) else [*command, flag, value]
    return argv, list(action.option_strings)


def test_every_subcommand_is_covered():
    assert {c[0] for c in COMMANDS} >= {"data", "train", "eval", "run", "flipflop", "lm", "convert", "inspect"}
    assert ("lm", "eval") in COMMANDS and ("data", "hierarchy") in COMMANDS and ("run",) in COMMANDS


@pytest.mark.parametrize("command", sorted(COMMANDS), ids=" ".join)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(data=st.data())
def test_a_bad_argument_is_one_error_line_naming_its_flag_and_creates_nothing(command, data):
    argv, flags = data.draw(bad_argv(command))
    err, out = io.StringIO(), io.StringIO()
    with tempfile.TemporaryDirectory() as folder:
        before = os.getcwd()
        os.chdir(folder)
        try:
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out), pytest.raises(SystemExit) as stop:
                main(argv)
            created = os.listdir(folder)
        finally:
            os.chdir(before)
    lines = err.getvalue().splitlines()
    assert stop.value.code == 2, (argv, err.getvalue())
    assert len(lines) == 1 and lines[0].startswith("tra: error: "), (argv, err.getvalue())
    assert any(flag.split("=")[0] in lines[0] for flag in flags), (argv, lines[0])
    assert "Traceback" not in err.getvalue() and out.getvalue() == "" and created == [], argv


def test_finite_float_refuses_what_float_accepts_but_no_flag_means():
    assert finite_float("1e-3") == 1e-3 and finite_float(" 2 ") == 2.0
    for text in ("nan", "inf", "-Infinity", "1e999"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected a finite number"):
            finite_float(text)
    assert not math.isnan(finite_float("0"))


def test_a_value_that_looks_like_a_flag_is_reported_as_the_flags_value(capsys):
    """``--num-tokens --0``: the error names --num-tokens (its value is missing), not an unknown flag '--0'."""
    with pytest.raises(SystemExit):
        main(["data", "selective_copy", "--num-tokens", "--0"])
    error = capsys.readouterr().err
    assert "argument --num-tokens" in error and "unrecognized" not in error
