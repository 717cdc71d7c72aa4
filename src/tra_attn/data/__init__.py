"""Data sources: procedural tasks (``synthetic``); real text comes in ``text``."""
