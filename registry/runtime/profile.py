"""The running process as a resolution profile: GPU architecture and library versions."""
from __future__ import annotations

from dataclasses import dataclass
from importlib import metadata

from registry.bundles import Profile
from registry.formats.errors import UserError


@dataclass(frozen=True)
class RuntimeProfile(Profile):
    """A `Profile` that can describe the process it runs in."""

    @classmethod
    def detect(cls, *, execution_mode: str = "inference", distributed_mode: str | None = None) -> "RuntimeProfile":
        """This process's GPU architecture (`cpu` without CUDA) and torch, CUDA and Triton versions.

        Imports torch (and only this does). Triton's version is read from its
        package metadata without importing it; absent, it is None and a bundle
        that bounds Triton will not match. A process inside a torch.distributed
        group of more than one rank must say which distributed mode it runs
        (tensor parallel, data parallel, ...): it is not guessed.
        """
        import torch

        architecture = "cpu"
        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            architecture = f"sm{major}{minor}"
        try:
            triton = metadata.version("triton")
        except metadata.PackageNotFoundError:
            triton = None
        if distributed_mode is None:
            dist = torch.distributed
            if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
                raise UserError(f"this process is one of {dist.get_world_size()} ranks: pass distributed_mode "
                                 "(the mode the bundles declare, e.g. tensor_parallel)")
            distributed_mode = "single"
        return cls(architecture, torch.__version__, torch.version.cuda, triton, execution_mode, distributed_mode)
