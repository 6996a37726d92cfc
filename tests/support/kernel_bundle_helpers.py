"""Compiled kernel bundles for the tests: a small real one, ELF edits of its cubins, a manifest refreshed after edits.

The cubins are real (the registry's own build of the built-in RMS norm,
D=128 bf16, for sm_90a and sm_100a); each edit changes the bytes of one
ELF structure in place (a symbol's flags or section, a string, a parameter
entry, a header field), as a hostile bundle would.
"""
from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import struct
from pathlib import Path

from elftools.elf.elffile import ELFFile

from registry.bundles.cubin import attribute_entries

KEY = "rms_d128_bfloat16"
ARCHES = ("sm_90a", "sm_100a")


def built_once_per_run(tmp_path_factory, op: str, arches: list[str] | None, cases: list[tuple[int, str]]) -> Path:
    """The built-in bundle of `op` with only `cases` (and `arches`; both targets when None), built once per run and
    shared by the files and xdist workers that read it: a test copies it before it edits anything."""
    import fcntl

    from registry.app.kernel_bundles import build_builtin_bundles

    base = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        base = base.parent  # the run's folder, above each worker's own
    name = "-".join([op, *(arches or ["all"]), *(f"{dim}{dtype}" for dim, dtype in cases)])
    root = base / f"built-{name}"
    with open(base / f"built-{name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / op / "bundle.json").exists():
            shutil.rmtree(root, ignore_errors=True)
            build_builtin_bundles(root, [op], arches, cases=cases)
    return root / op


def small_bundle(tmp_path_factory) -> Path:
    """The built-in RMS norm bundle with only D=128 bf16, both targets (about 3 s of compiling), built once per run
    (`built_once_per_run`)."""
    return built_once_per_run(tmp_path_factory, "rms_norm", None, [(128, "bfloat16")])


def kernel_file(bundle: Path, arch: str, suffix: str) -> Path:
    return bundle / "kernels" / KEY / f"{arch}.{suffix}"


def refresh_manifest(bundle: Path) -> None:
    """Declare every file's present size and SHA-256 again (after an edit), the rest of the manifest unchanged."""
    path = bundle / "bundle.json"
    data = json.loads(path.read_text())
    for entry in data["files"]:
        raw = (bundle / entry["path"]).read_bytes()
        entry.update(size=len(raw), sha256=hashlib.sha256(raw).hexdigest())
    path.write_text(json.dumps(data))


# ---- ELF edits ---------------------------------------------------------------------------------------------------

def elf(data: bytes) -> ELFFile:
    return ELFFile(io.BytesIO(data))


def symbol_entry(data: bytes, name: str) -> int:
    """The file offset of symbol `name`'s entry in .symtab."""
    table = elf(data).get_section_by_name(".symtab")
    for index, symbol in enumerate(table.iter_symbols()):
        if symbol.name == name:
            return table["sh_offset"] + index * table["sh_entsize"]
    raise KeyError(name)


def first_internal(data: bytes) -> str:
    table = elf(data).get_section_by_name(".symtab")
    return next(s.name for s in table.iter_symbols() if s.name.startswith("$__internal"))


def with_bytes(data: bytes, offset: int, new: bytes) -> bytes:
    return data[:offset] + new + data[offset + len(new):]


def extra_entry(data: bytes) -> bytes:
    """A second kernel entry: an internal function marked global and as a CUDA entry."""
    at = symbol_entry(data, first_internal(data))
    return with_bytes(data, at + 4, bytes([0x12, data[at + 5] | 0x10]))  # STB_GLOBAL << 4 | STT_FUNC


def renamed_entry(data: bytes) -> bytes:
    return data.replace(b"_rms_norm_kernel", b"_rms_norm_kernex")


def undefined_symbol(data: bytes) -> bytes:
    at = symbol_entry(data, first_internal(data))
    return with_bytes(data, at + 6, struct.pack("<H", 0))  # st_shndx = SHN_UNDEF


def device_launch(data: bytes) -> bytes:
    """An internal function's name in .strtab overwritten with a device runtime entry point."""
    name = first_internal(data).encode() + b"\0"
    strtab = elf(data).get_section_by_name(".strtab")
    at = strtab["sh_offset"] + strtab.data().index(name)
    return with_bytes(data, at, b"cudaLaunchDeviceV2\0".ljust(len(name), b"\0"))


def _attributes(data: bytes, section_name: str) -> tuple[int, list]:
    section = elf(data).get_section_by_name(section_name)
    return section["sh_offset"], section.data()


def _attribute_offsets(data: bytes, section_name: str, attr: int) -> list[int]:
    """File offsets of the entries of attribute `attr` in a .nv.info section."""
    base, raw = _attributes(data, section_name)
    found, at = [], 0
    for fmt, found_attr, value in attribute_entries(raw, "x"):
        if found_attr == attr:
            found.append(base + at)
        at += 4 + (len(value) if fmt == 4 else 0)
    return found


def parameter_size(data: bytes) -> bytes:
    """The last declared parameter (eps, 4 bytes) listed as 8 bytes."""
    for at in _attribute_offsets(data, ".nv.info._rms_norm_kernel", 0x17):
        _, ordinal, offset, packed = struct.unpack_from("<IHHI", data, at + 4)
        if ordinal == 3:
            return with_bytes(data, at + 4, struct.pack("<IHHI", 0, ordinal, offset, (packed & 0x3FFFF) | (8 << 18)))
    raise AssertionError("no parameter 3")


def flipped_arch(data: bytes) -> bytes:
    """sm_90a's header flags naming sm_100a (ABI 7: the SM number in the low byte)."""
    flags = struct.unpack_from("<I", data, 0x30)[0]
    return with_bytes(data, 0x30, struct.pack("<I", (flags & ~0xFF) | 100))


def not_accelerated(data: bytes) -> bytes:
    flags = struct.unpack_from("<I", data, 0x30)[0]
    return with_bytes(data, 0x30, struct.pack("<I", flags & ~0x800))


def other_machine(data: bytes) -> bytes:
    return with_bytes(data, 0x12, struct.pack("<H", 62))  # EM_X86_64


def unknown_attribute(data: bytes) -> bytes:
    at = _attribute_offsets(data, ".nv.info._rms_norm_kernel", 0x1B)[0]  # EIATTR_MAXREG_COUNT -> 0x7E
    return with_bytes(data, at + 1, bytes([0x7E]))


def cluster_attribute(data: bytes) -> bytes:
    at = _attribute_offsets(data, ".nv.info._rms_norm_kernel", 0x1B)[0]
    return with_bytes(data, at + 1, bytes([0x3E]))  # EIATTR_EXPLICIT_CLUSTER


def block_size(data: bytes) -> bytes:
    at = _attribute_offsets(data, ".nv.info._rms_norm_kernel", 0x10)[0]
    return with_bytes(data, at + 4, struct.pack("<I", 64))


def malformed_info(data: bytes) -> bytes:
    at = _attribute_offsets(data, ".nv.info._rms_norm_kernel", 0x1B)[0]
    return with_bytes(data, at, bytes([9]))  # no such attribute format
