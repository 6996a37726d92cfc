"""The hostile-cubin gallery: Triton kernels that attack the trusted launcher, in the modulated LayerNorm's signature.

Each has the parameters of the built-in `_modln_kernel` (registry/kernels/modln.py),
so it ships under the same launch spec as an honest modulated LayerNorm
bundle and is registered (its cubin rebuilt by the registry and checked) like
one; what it does on a GPU is the attack. `benchmarks/gpu_kernels.sh` and the
`device` tests of tests/kernels/test_launcher_gpu.py evaluate each and expect its class
named in the one failure recorded:

| kernel | attack | refusal |
| --- | --- | --- |
| `spin_kernel` | never ends (a volatile load until a bit pattern no input holds) | `launch deadline` |
| `overrun_kernel` | the honest result, plus a row written past the end of `y` | `out-of-bounds write` |
| `unmapped_read_kernel` | reads 2 TiB past `x` | `kernel fault` |
| `scan_kernel` | scans 64 MiB below `y` for `MARKER`, a value the baseline's process holds on the same device, and writes what it found | `kernel fault` (an unmapped page) or `stale result` (nothing found: contexts do not share memory) |

Never executed by the registry's Python: registration reads and rebuilds the
TTIR; only a GPU runs the cubins.
"""
import triton
import triton.language as tl

MARKER = 0x5245474953545259  # "REGISTRY", the value the scan looks for


@triton.jit
def spin_kernel(x_ptr, scale_ptr, shift_ptr, y_ptr, seq, eps,
                D: tl.constexpr, BLOCK_D: tl.constexpr, IS_BF16: tl.constexpr):
    flag_ptr = x_ptr.to(tl.pointer_type(tl.int32))
    flag = tl.load(flag_ptr, volatile=True)
    while flag != 0x7FC17FC1:  # two NaN patterns no corpus input holds
        flag = tl.load(flag_ptr, volatile=True)
    tl.store(y_ptr.to(tl.pointer_type(tl.int32)), flag)


@triton.jit
def overrun_kernel(x_ptr, scale_ptr, shift_ptr, y_ptr, seq, eps,
                   D: tl.constexpr, BLOCK_D: tl.constexpr, IS_BF16: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_D)
    mask = cols < D
    x = tl.load(x_ptr + row * D + cols, mask=mask, other=0.0)
    tl.store(y_ptr + row * D + cols, x, mask=mask)
    if row == tl.num_programs(0) - 1:
        tl.store(y_ptr + (row + 1) * D + cols, x, mask=mask)  # one row past the end: the guard region


@triton.jit
def unmapped_read_kernel(x_ptr, scale_ptr, shift_ptr, y_ptr, seq, eps,
                         D: tl.constexpr, BLOCK_D: tl.constexpr, IS_BF16: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_D)
    far = tl.load(x_ptr + (1 << 40) + row * D + cols, mask=cols < D, other=0.0)
    tl.store(y_ptr + row * D + cols, far, mask=cols < D)


@triton.jit
def scan_kernel(x_ptr, scale_ptr, shift_ptr, y_ptr, seq, eps,
                D: tl.constexpr, BLOCK_D: tl.constexpr, IS_BF16: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    words = y_ptr.to(tl.pointer_type(tl.int64))
    lanes = tl.arange(0, 1024).to(tl.int64)
    found = tl.zeros((1024,), dtype=tl.int64)
    for block in range(0, 8192):  # 8192 blocks of 1024 words: 64 MiB below y, this program's stripe
        address = words - (block + 1) * 1024 + lanes - row * 8192 * 1024
        found += tl.where(tl.load(address, volatile=True) == 0x5245474953545259, 1, 0)
    cols = tl.arange(0, BLOCK_D)
    tl.store(y_ptr + row * D + cols, tl.sum(found, axis=0).to(tl.float32), mask=cols < D)
