"""Procedural tasks (the protocol is ``data/task.py``). No downloads: every task generates its own data.

Every module of this package is imported here, so a task registers itself with ``@register_task`` in
its own file and nothing else needs to list it.
"""

import importlib
import pkgutil

for _module in pkgutil.iter_modules(__path__):
    importlib.import_module(f"{__name__}.{_module.name}")
