"""Retrofitting: does a short uptraining give a RoPE model TRA's extrapolation?

On a text budget of the language-model presets, a RoPE model of transformers' own class (Llama) is trained, then
evaluated at 1x-16x its training length as it is and with transformers' inference-time RoPE scaling (linear, dynamic
NTK, YaRN), converted to TRA (RoPE kept and removed), FoX and ALiBi (``tra_attn.hf.add_attention``), each trained 10%
and 25% of the budget more and evaluated, beside TRA trained from scratch on the same budget. ``tra retrofit`` runs
it (``run.py``) and writes its page; every stage is cached (``stages.py``), so a rerun skips what is done.

For a model of your own: ``training.train_causal_lm`` (continue training a converted model on a token array) and
``scoring.bits_per_byte`` (evaluate it at any length), docs/huggingface.md. Not an experiment of ``tra run``
(``EXPERIMENTS`` is empty); importing this package does not import transformers.
"""

EXPERIMENTS = ()
