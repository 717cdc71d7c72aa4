"""Register the Hugging Face classes (``tra_attn.hf``) whenever ``transformers`` is imported, without importing it.

``import tra_attn`` must not pay for importing ``transformers`` (seconds), yet a user who imports both, in
either order, expects ``AutoModelForCausalLM.from_pretrained`` to know ``model_type = "tra"``. If
``transformers`` is already imported, ``install`` registers at once; otherwise a one-shot import hook
registers right after ``transformers`` itself has finished importing.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
import warnings


def _register() -> None:
    try:
        import tra_attn.hf  # noqa: F401  (registers on import)
    except Exception as err:  # an incompatible transformers must not break the user's `import transformers`
        warnings.warn(f"tra_attn: could not register with transformers ({err})", stacklevel=2)


class _AfterTransformersImport(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the real loader of ``transformers`` so registration runs after it."""

    def find_spec(self, name, path=None, target=None):
        if name != "transformers":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None and hasattr(spec.loader, "exec_module"):
            loader_exec = spec.loader.exec_module

            def exec_then_register(module):
                loader_exec(module)
                _register()

            spec.loader.exec_module = exec_then_register
        return spec


def install() -> None:
    """Register now if ``transformers`` is imported, else once it is (nothing if it is not installed)."""
    if "transformers" in sys.modules:
        _register()
    elif importlib.util.find_spec("transformers") is not None and not any(
        isinstance(finder, _AfterTransformersImport) for finder in sys.meta_path
    ):
        sys.meta_path.insert(0, _AfterTransformersImport())
