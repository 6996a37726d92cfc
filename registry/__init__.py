"""An event-sourced promotion registry for GPU kernel artifacts of video diffusion models."""

__version__ = "0.1.0"
