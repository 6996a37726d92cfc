"""Triton kernels for video-DiT hot spots, their torch references and the evaluation runner.

Modules: ``reference`` (torch eager arm), ``modln``/``gated``/``rmsnorm``
(kernels and wrappers), ``rowwise`` (shared layout and rounding), ``corpus``
(shapes, seeded inputs), ``ops`` (registry, entries, cost models),
``launches`` (execution signal), ``evaluate`` (evidence items), and the
isolation the runner evaluates through: ``isolation`` (the harness side of a
worker process), ``worker`` (the candidate's process), ``wire`` (the frames
between them), ``checks`` (what every call is checked for, refusal classes),
``sandbox`` (what the candidate's jail holds, and whether this machine has
one), ``sandbox_launch`` (the launcher that builds it and confines each
worker), ``zygote`` (the fork server inside it). Compiled kernel bundles:
``plan`` (a launch spec and one call's inputs to a LaunchPlan),
``ttir_compile`` (TTIR to cubin with the pinned Triton), ``rebuild`` and
``rebuild_worker`` (that compile in the sandbox, for registration),
``builtin_bundles`` and ``builtin_build`` (the built-in kernels compiled as
bundles). The trusted launcher: ``launch_plan`` (what one call launches),
``launcher`` (cuLaunchKernel on buffers it guards and times),
``simulated_driver`` (the driver's stand-in for machines without a GPU),
``launcher_worker`` and ``launcher_process`` (its jailed process and the
harness side), ``tensor_bytes`` (tensors to its bytes and back),
``launch_evaluate`` (a compiled kernel evaluated through it).

Nothing is imported here on purpose: Triton decides at decoration time
whether a kernel is compiled or interpreted, so ``TRITON_INTERPRET`` must be
set before a kernel module is imported, not before this package is.
"""
