"""Experiments: questions (``spec.py``: the methods, seeds, learning rates and budget a results folder asks
about), the runs they need, each stored once by its configuration (``identity.py``, ``store.py``) and obtained by
one engine (``engine.py``), and the pages written from their rows (``run.py``).

An experiment package (flip-flop, language modelling, passkey, the suite's procedural tasks) holds a task's
presets, what its runs evaluate and its section of a page, and lists its records in ``EXPERIMENTS``
(``registry.py``). Nothing here parses command lines: the ``tra`` command (``tra_attn.cli``) calls in, never
the other way round.
"""
