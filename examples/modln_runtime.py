"""A runtime that ships the promoted fused modulated LayerNorm, and falls back to the reference when it may not.

The inference side of the registry in one page (docs/runtime.md walks through
it): detect where we run, ask the registry (or a lock file exported from it
and signed by a key we trust) which promoted bundle replaces the eager
modulated LayerNorm for these inputs, load it through the trusted loader, and
otherwise log every reason code (a refused lock's too) and use the reference.

    python examples/modln_runtime.py --lock registry.lock.json --trusted-key demo-out/signing.key.pub \
        --bundles demo-out/bundles
    python examples/modln_runtime.py --db sqlite:///demo.db --bundles demo-out/bundles
"""
from __future__ import annotations

import argparse
import logging
from typing import Callable

import torch

from registry.bundles import reference_fingerprint
from registry.kernels.reference import modulated_layernorm
from registry.runtime import LockRefused, RuntimeProfile, load, resolve

log = logging.getLogger("modln_runtime")
DEMO_WORKLOAD = "tiny-dit-modln-op"


def choose_modulated_layernorm(workload: str, bundles: str, example_inputs: tuple[torch.Tensor, ...], *,
                               database: str | None = None, lock: str | None = None,
                               trusted_keys: list[str] | None = None) -> tuple[Callable, str]:
    """The promoted kernel when one matches this process and these inputs, else the reference; and its name."""
    try:
        answer = resolve(workload, RuntimeProfile.detect(), database=database, lock=lock, trusted_keys=trusted_keys,
                         fingerprint=reference_fingerprint(modulated_layernorm), inputs=example_inputs)
    except LockRefused as refused:
        log.warning("modulated LayerNorm: lock refused: %s (%s)", refused.code, refused.detail)
        return modulated_layernorm, "reference"
    if answer.match is None:
        for outcome in answer.resolution.others:
            log.warning("modulated LayerNorm: not using %s: %s (%s)", outcome.artifact, outcome.code, outcome.detail)
        return modulated_layernorm, "reference"
    log.info("modulated LayerNorm: using %s (bundle %s) from %s", answer.match.artifact,
             answer.match.bundle_sha256[:12], answer.source)
    return load(answer.match, trusted_root=bundles), answer.match.artifact


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--db", help="registry database URL")
    source.add_argument("--lock", help="lock file exported with `registry lock`")
    parser.add_argument("--trusted-key", action="append", default=None,
                        help="public key a --lock must be signed by (repeat to trust several)")
    parser.add_argument("--bundles", required=True, help="trusted directory holding one bundle per artifact id")
    parser.add_argument("--workload", default=DEMO_WORKLOAD)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")

    device = "cuda" if torch.cuda.is_available() else "cpu"
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(2, 8, 64, generator=generator).to(device, torch.bfloat16)
    scale, shift = (0.1 * torch.randn(2, 64, generator=generator)).to(device), torch.zeros(2, 64, device=device)
    operation, name = choose_modulated_layernorm(args.workload, args.bundles, (x, scale, shift),
                                                 database=args.db, lock=args.lock, trusted_keys=args.trusted_key)
    same = torch.equal(operation(x, scale, shift), modulated_layernorm(x, scale, shift))
    print(f"modulated LayerNorm ran as {name}; equal to the reference bit for bit: {same}")
    return name


if __name__ == "__main__":
    main()
