"""Experiments: comparisons of methods on a task, each a record (``experiment.py: Experiment``) run by one
engine (``engine.py: run_comparison``) and found in one registry (``registry.py``).

An experiment package (flip-flop, language modelling, the suite's procedural tasks) holds its presets, its
page and what its runs evaluate as data and functions, and lists its records in ``EXPERIMENTS``. Nothing
here parses command lines: the ``tra`` command (``tra_attn.cli``) calls in, never the other way round.
"""
