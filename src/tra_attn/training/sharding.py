"""FSDP2 (``--fsdp``): shard a model over the ranks, and checkpoint it through torch.distributed.checkpoint.

Each transformer block, then the whole model, is wrapped with ``fully_shard``: parameters, gradients
and AdamW moments are split across ranks, and a block's full parameters exist only while it runs.
A checkpoint holds the full weights in the usual ``model.safetensors`` (gathered to rank 0 on the CPU,
so evaluation, sampling and conversion read it as any other checkpoint) and the sharded optimizer state
in ``optimizer/``, written by every rank with torch.distributed.checkpoint (DCP). DCP reshards on load,
so a run resumes on a different number of processes, or on one process without FSDP.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import torch
import torch.distributed as dist

# torch.distributed.checkpoint is imported where it is used: it costs about a second, which runs
# without --fsdp need not pay.

OPTIMIZER_DIR = "optimizer"
SHARDED = "sharded"  # train_state["optimizer"] of a checkpoint whose optimizer state is in OPTIMIZER_DIR


def shard(model: torch.nn.Module) -> None:
    """FSDP2-wrap each block, then the model (in place). A parameter that the blocks share (an attention kind's
    parameters shared across layers) must be in one group, the model's: each block's group is then the largest
    parts of the block that hold none of them (a parameter in two groups would become two parameters)."""
    from torch.distributed.fsdp import fully_shard

    # The model returns its logits or per-token loss, which callers reduce out of place: the warning
    # about in-place ops on an FSDP module's view output does not apply.
    warnings.filterwarnings("ignore", message="FSDP2-wrapped module .* returned a view tensor")
    shared = shared_across(model.blocks)
    for block in model.blocks:
        parts = unshared_parts(block, shared)
        if parts:
            fully_shard(parts if len(parts) > 1 else parts[0])
    fully_shard(model)


def shared_across(modules) -> set[torch.nn.Parameter]:
    """The parameters held by more than one of ``modules``."""
    seen, shared = set(), set()
    for module in modules:
        params = set(module.parameters())
        shared |= seen & params
        seen |= params
    return shared


def unshared_parts(module: torch.nn.Module, shared: set) -> list[torch.nn.Module]:
    """The largest submodules of ``module`` (itself if it can) that hold none of the parameters ``shared``."""
    if not any(p in shared for p in module.parameters()):
        return [module]
    return [part for child in module.children() for part in unshared_parts(child, shared)]


def full_weights(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The full state dict on rank 0's CPU (empty on other ranks); every rank must call it."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def save_optimizer(model: torch.nn.Module, optimizer: torch.optim.Optimizer, folder: Path) -> None:
    """Every rank writes its shard of the optimizer state to ``folder/optimizer``."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    dcp.save(get_optimizer_state_dict(model, optimizer), checkpoint_id=str(Path(folder) / OPTIMIZER_DIR))


def load_optimizer(model: torch.nn.Module, optimizer: torch.optim.Optimizer, checkpoint: Path) -> None:
    """Load ``checkpoint/optimizer`` into ``optimizer``, resharded for this model (sharded or not)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict, set_optimizer_state_dict

    path = Path(checkpoint) / OPTIMIZER_DIR
    if not path.is_dir():
        raise ValueError(f"checkpoint {checkpoint}: {OPTIMIZER_DIR}/ is missing; expected the sharded optimizer state")
    state = get_optimizer_state_dict(model, optimizer)
    with warnings.catch_warnings():
        if not dist.is_initialized():  # one process reading a sharded state is intended here
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
        dcp.load(state, checkpoint_id=str(path))
    set_optimizer_state_dict(model, optimizer, state)
