"""docs/model.md's table of each kind's options against the options classes themselves: every option of every kind
is listed, none that a kind lacks, each at its default, and an option with a fixed set of values names each of them,
so the page cannot drift from the code."""

from __future__ import annotations

import re
from pathlib import Path

from tra_attn.layers import ATTENTION_KINDS

TABLE_HEAD = "| kind (prefix) | option | default | meaning |"
DOC = Path(__file__).parents[2] / "docs" / "model.md"


def documented() -> dict[str, dict[str, tuple[str, str]]]:
    """{kind: {option: (the default as the table writes it, its meaning)}} from the table's rows."""
    lines = DOC.read_text().split(TABLE_HEAD, 1)[1].split("\n\n", 1)[0].strip().splitlines()[1:]
    found: dict[str, dict[str, str]] = {}
    kinds: list[str] = []
    for line in lines:
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
        if cells[0]:
            kinds = re.findall(r"`(\w+)`", cells[0].split("(")[0])
        names = re.findall(r"`(\w+)`", cells[1])
        defaults = cells[2].split(", ") if len(names) > 1 else [cells[2]]
        for kind in kinds:
            found.setdefault(kind, {}).update((n, (d, cells[3])) for n, d in zip(names, defaults))
    return found


def written(value) -> str:
    """A default as the table writes it."""
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, str):
        return f'`"{value}"`'
    return repr(value)


def test_every_option_of_every_kind_is_in_the_table_at_its_default():
    table = documented()
    for name, kind in ATTENTION_KINDS.items():
        defaults = kind.options().to_dict()
        listed = table.get(name, {})
        assert sorted(listed) == sorted(defaults), name
        for option, value in defaults.items():
            shown, meaning = listed[option]
            choices = getattr(kind.options.__dataclass_fields__[option].metadata.get("check"), "choices", ())
            assert [c for c in choices if f"`{c}`" not in meaning] == [], (name, option, meaning)
            if "(" in shown:  # a default that differs by kind, said in words: the kind's own must be among them
                assert written(value) in shown, (name, option, shown)
            elif isinstance(value, float) and not isinstance(value, bool):
                assert float(shown) == value, (name, option, shown)
            else:
                assert shown == written(value), (name, option, shown)
