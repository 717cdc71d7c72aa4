"""Data sources behind one task protocol: procedural tasks (``synthetic``) and real text (``text``).

Importing this package registers every task of both, so ``make_task`` knows them all.
"""

from . import synthetic, text  # noqa: F401  (registration)
