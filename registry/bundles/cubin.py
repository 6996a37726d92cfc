"""A cubin read as data: the checks a compiled kernel's ELF must pass before the registry rebuilds it.

Registration of a `registry.triton-kernel/1` bundle (docs/bundles.md) reads
each cubin with pyelftools, never loads it, and refuses it in one line
naming the reason (`CUBIN_REFUSALS`) unless:

- it is a 64-bit little-endian CUDA ELF executable of a known CUDA ELF ABI,
  built for exactly the target the spec declares (the SM number and the
  `a` suffix: in the header flags of ABI 7, in `.nv.compat` for ABI 8);
- its entry symbols (functions marked as kernels) are exactly the one the
  spec names for that kernel, and no other section holds kernel code;
- its parameter layout (`EIATTR_KPARAM_INFO` in `.nv.info.<entry>`, with the
  parameter bank's size) is the spec's declared parameters, packed in order
  at their natural alignment, followed by Triton's scratch pointers;
- its requested block (`EIATTR_REQNTID`) is 32 x `num_warps` threads;
- it references no symbol it does not define but the shared-memory
  placeholders ptxas emits (`.nv.reservedSmem.*`), and nothing of the
  device runtime (device-side launches: `cudaLaunchDevice`,
  `cudaGetParameterBuffer`, ...; calls out such as `vprintf` or
  `__assertfail`, which `EIATTR_EXTERNS` / `EIATTR_SYSCALL_OFFSETS` list);
- its kernel attributes are all known ones, with no cluster (one CTA per
  cluster in version 1).

These are the first line; the second is the registry's own rebuild of the
cubin from its TTIR, which must give the same bytes (registry.kernels.rebuild).
Pure: pyelftools reads the bytes; no CUDA, no torch.
"""
from __future__ import annotations

import io
import re
import struct
from dataclasses import dataclass, field

from elftools.common.exceptions import ELFError
from elftools.construct.core import ConstructError
from elftools.elf.elffile import ELFFile

from registry.formats.launch_spec import SCRATCH_POINTERS, TARGET_ARCHES, KernelDecl

from .manifest import BundleError

CUBIN_REFUSALS = {
    "not_elf": "not a readable ELF file",
    "truncated": "the file ends before what its headers declare",
    "not_cuda": "not a 64-bit little-endian CUDA ELF executable of a known CUDA ELF ABI",
    "wrong_arch": "built for another target than the spec declares",
    "extra_entry": "defines a kernel entry the spec does not name",
    "renamed_entry": "its kernel entry is not the one the spec names",
    "no_entry": "defines no kernel entry",
    "parameter_layout": "its parameters are not the spec's declared ones followed by Triton's scratch pointers",
    "block_size": "the block it requests is not 32 x num_warps threads",
    "undefined_symbol": "references a symbol it does not define",
    "device_launch": "references the device runtime (a device-side launch)",
    "extern_call": "calls out of the kernel (printf, assert, any extern function)",
    "cluster": "declares a cluster of several CTAs (version 1 launches one CTA per cluster)",
    "unknown_attribute": "carries a kernel attribute the registry does not know",
    "malformed_info": "its kernel attributes (.nv.info) do not parse",
}
"""Every reason a cubin is refused for, by the name its refusal carries."""

EM_CUDA = 190
STO_CUDA_ENTRY = 0x10
ABI_V7, ABI_V8 = (0x33, 7), (0x41, 8)
"""(EI_OSABI, EI_ABIVERSION) of the CUDA ELF ABIs the pinned ptxas writes: 7 up to sm_90a, 8 from sm_100a."""
EF_CUDA_ACCELERATORS = 0x800
EICOMPAT_ACCELERATOR_TARGET = 0x09

# Kernel attributes (.nv.info) by id, as cuobjdump names them; what ptxas 12.8/13.1 write for Triton 3.7.1's
# kernels (row-wise, atomics, tl.dot on sm_90a and sm_100a). Anything else is refused by number.
ATTRIBUTES = {
    0x0A: "EIATTR_PARAM_CBANK", 0x0F: "EIATTR_EXTERNS", 0x10: "EIATTR_REQNTID", 0x11: "EIATTR_FRAME_SIZE",
    0x12: "EIATTR_MIN_STACK_SIZE", 0x17: "EIATTR_KPARAM_INFO", 0x19: "EIATTR_CBANK_PARAM_SIZE",
    0x1B: "EIATTR_MAXREG_COUNT", 0x1C: "EIATTR_EXIT_INSTR_OFFSETS", 0x1E: "EIATTR_CRS_STACK_SIZE",
    0x28: "EIATTR_COOP_GROUP_INSTR_OFFSETS", 0x29: "EIATTR_COOP_GROUP_MASK_REGIDS", 0x2F: "EIATTR_REGCOUNT",
    0x31: "EIATTR_INT_WARP_WIDE_INSTR_OFFSETS", 0x36: "EIATTR_SW_WAR", 0x37: "EIATTR_CUDA_API_VERSION",
    0x38: "EIATTR_NUM_MBARRIERS", 0x39: "EIATTR_MBARRIER_INSTR_OFFSETS", 0x3D: "EIATTR_CTA_PER_CLUSTER",
    0x3E: "EIATTR_EXPLICIT_CLUSTER", 0x41: "EIATTR_RESERVED_SMEM_USED", 0x46: "EIATTR_SYSCALL_OFFSETS",
    0x4A: "EIATTR_VRC_CTA_INIT_COUNT", 0x4C: "EIATTR_NUM_BARRIERS", 0x4F: "EIATTR_AT_ENTRY_FRAGMENTS",
    0x50: "EIATTR_SPARSE_MMA_MASK", 0x51: "EIATTR_TCGEN05_1CTA_USED", 0x5A: "EIATTR_0x5A",
    0x5F: "EIATTR_MERCURY_ISA_VERSION",
}
REFUSED_ATTRIBUTES = {0x3D: "cluster", 0x3E: "cluster", 0x0F: "extern_call", 0x46: "extern_call"}
KPARAM_INFO, CBANK_PARAM_SIZE, PARAM_CBANK, REQNTID = 0x17, 0x19, 0x0A, 0x10
EIFMT_NVAL, EIFMT_BVAL, EIFMT_HVAL, EIFMT_SVAL = 1, 2, 3, 4

RESERVED_SHARED = re.compile(r"\.nv\.reservedSmem\.(offset[0-9]+|cap)")
"""The shared-memory placeholders ptxas leaves undefined (weak) in every cubin; the driver resolves them."""
DEVICE_RUNTIME = re.compile(r"cuda(LaunchDevice|GetParameterBuffer|CG|Stream|Device|Malloc|Free|Event|Graph)\w*")
"""Device runtime entry points (CUDA dynamic parallelism and its friends): a kernel that names one launches."""


class CubinRefused(BundleError):
    """A cubin refused before any rebuild: `where: reason: detail`, the reason one of CUBIN_REFUSALS."""

    def __init__(self, where: str, reason: str, detail: str) -> None:
        self.reason = reason
        super().__init__(f"{where}: cubin refused ({reason}): {detail}")


@dataclass(frozen=True)
class CubinFacts:
    """What registration read from one cubin (for its messages and tests)."""

    arch: str
    entries: tuple[str, ...]
    param_bytes: tuple[int, ...]
    attributes: frozenset[int] = field(default_factory=frozenset)


def check_cubin(data: bytes, kernel: KernelDecl, arch: str, where: str) -> CubinFacts:
    """Every check of the module docstring, in order; the first that fails is raised as CubinRefused."""
    try:
        return _Reader(data, where).check(kernel, arch)
    except CubinRefused:
        raise
    except (ELFError, ConstructError, struct.error, IndexError, UnicodeDecodeError,
            OverflowError) as exc:  # what pyelftools (and a table cut short) raises on hostile bytes
        raise CubinRefused(where, "not_elf", f"{type(exc).__name__}: {str(exc)[:120]}") from None


def attribute_entries(data: bytes, where: str) -> list[tuple[int, int, bytes | int]]:
    """The (format, attribute, value) entries of a `.nv.info` or `.nv.compat` section, 4-byte aligned."""
    found, at = [], 0
    while at < len(data):
        if at + 4 > len(data):
            raise CubinRefused(where, "malformed_info", f"an attribute header cut at byte {at}")
        fmt, attr = data[at], data[at + 1]
        if fmt == EIFMT_SVAL:
            size = struct.unpack_from("<H", data, at + 2)[0]
            if at + 4 + size > len(data):
                raise CubinRefused(where, "malformed_info", f"attribute {attr:#x} runs past its section")
            found.append((fmt, attr, data[at + 4:at + 4 + size]))
            at += 4 + size
        elif fmt == EIFMT_HVAL:
            found.append((fmt, attr, struct.unpack_from("<H", data, at + 2)[0]))
            at += 4
        elif fmt in (EIFMT_NVAL, EIFMT_BVAL):
            found.append((fmt, attr, data[at + 2]))
            at += 4
        else:
            raise CubinRefused(where, "malformed_info", f"attribute format {fmt} at byte {at}")
    return found


class _Reader:
    def __init__(self, data: bytes, where: str) -> None:
        self.data, self.where = data, where

    def refuse(self, reason: str, detail: str) -> CubinRefused:
        return CubinRefused(self.where, reason, detail)

    def check(self, kernel: KernelDecl, arch: str) -> CubinFacts:
        if self.data[:4] != b"\x7fELF":
            raise self.refuse("not_elf", "no ELF magic")
        if len(self.data) > 5 and (self.data[4], self.data[5]) != (2, 1):
            raise self.refuse("not_cuda", f"ELF class {self.data[4]}, data encoding {self.data[5]}; a cubin is "
                                          "64-bit little-endian")
        self._check_header_extent()
        elf = ELFFile(io.BytesIO(self.data))
        self._check_extent(elf)
        header = elf.header
        ident = header["e_ident"]
        abi = (ident["EI_OSABI"], ident["EI_ABIVERSION"])
        if ident["EI_CLASS"] != "ELFCLASS64" or ident["EI_DATA"] != "ELFDATA2LSB" or header["e_machine"] not in \
                ("EM_CUDA", EM_CUDA) or header["e_type"] != "ET_EXEC" or abi not in (ABI_V7, ABI_V8):
            raise self.refuse("not_cuda", f"class {ident['EI_CLASS']}, data {ident['EI_DATA']}, machine "
                                          f"{header['e_machine']}, type {header['e_type']}, ABI {abi}")
        sections = {section.name: section for section in elf.iter_sections()}
        built_for = self._arch(header["e_flags"], abi, sections.get(".nv.compat"))
        if built_for != arch:
            raise self.refuse("wrong_arch", f"it is built for {built_for}; the spec declares it for {arch}")
        attributes = self._check_attributes(sections)
        entries = self._check_symbols(elf, kernel.entry)
        params = self._check_parameters(sections.get(f".nv.info.{kernel.entry}"), kernel)
        self._check_block(sections.get(f".nv.info.{kernel.entry}"), kernel)
        return CubinFacts(built_for, entries, params, frozenset(attributes))

    def _check_header_extent(self) -> None:
        """The ELF header and the tables it locates lie inside the file (read before pyelftools reads them)."""
        size = len(self.data)
        if size < 64:
            raise self.refuse("truncated", f"{size} bytes, fewer than an ELF header's 64")
        phoff, shoff = struct.unpack_from("<QQ", self.data, 0x20)
        phentsize, phnum, shentsize, shnum = struct.unpack_from("<HHHH", self.data, 0x36)
        for offset, count, entry in ((shoff, shnum, shentsize), (phoff, phnum, phentsize)):
            if count and offset + count * entry > size:
                raise self.refuse("truncated", f"{size} bytes; its headers reach byte {offset + count * entry}")

    def _check_extent(self, elf: ELFFile) -> None:
        size = len(self.data)
        for section in elf.iter_sections():
            if section["sh_type"] != "SHT_NOBITS" and section["sh_offset"] + section["sh_size"] > size:
                raise self.refuse("truncated", f"{size} bytes; section {section.name} ends at byte "
                                               f"{section['sh_offset'] + section['sh_size']}")
        for segment in elf.iter_segments():
            if segment["p_offset"] + segment["p_filesz"] > size:
                raise self.refuse("truncated", f"{size} bytes; a segment ends at byte "
                                               f"{segment['p_offset'] + segment['p_filesz']}")

    def _arch(self, flags: int, abi: tuple[int, int], compat) -> str:
        if abi == ABI_V7:
            sm, accelerated = flags & 0xFF, bool(flags & EF_CUDA_ACCELERATORS)
        else:
            sm = (flags >> 8) & 0xFF
            values = {attr: value for _, attr, value in attribute_entries(compat.data(), self.where)} \
                if compat is not None else {}
            accelerated = values.get(EICOMPAT_ACCELERATOR_TARGET) == 1
        return f"sm_{sm}{'a' if accelerated else ''}"

    def _check_symbols(self, elf: ELFFile, entry: str) -> tuple[str, ...]:
        entries: list[str] = []
        for table in elf.iter_sections():
            if table["sh_type"] != "SHT_SYMTAB":
                continue
            raw, size = table.data(), table["sh_entsize"]
            if size != 24:
                raise self.refuse("not_cuda", f"symbol table {table.name} has {size}-byte entries")
            for index, symbol in enumerate(table.iter_symbols()):
                name, info = symbol.name, symbol["st_info"]
                if DEVICE_RUNTIME.fullmatch(name):
                    raise self.refuse("device_launch", f"it names {name}")
                if symbol["st_shndx"] == "SHN_UNDEF" and name and not (
                        RESERVED_SHARED.fullmatch(name) and info["bind"] == "STB_WEAK"):
                    raise self.refuse("undefined_symbol", f"{name} ({info['bind']}, {info['type']}) is not defined "
                                                          "in it")
                other = raw[index * size + 5]
                if info["type"] == "STT_FUNC" and (other & STO_CUDA_ENTRY or info["bind"] == "STB_GLOBAL"):
                    entries.append(name)
        text = sorted(s.name[len(".text."):] for s in elf.iter_sections() if s.name.startswith(".text."))
        found = sorted(set(entries) | set(text))
        if not found:
            raise self.refuse("no_entry", f"the spec names {entry}")
        if entry not in found:
            raise self.refuse("renamed_entry", f"it defines {', '.join(found)}; the spec names {entry}")
        if found != [entry]:
            raise self.refuse("extra_entry", f"it defines {', '.join(found)}; the spec names only {entry}")
        return tuple(found)

    def _check_attributes(self, sections: dict) -> set[int]:
        seen: set[int] = set()
        for name, section in sections.items():
            if not (name.startswith((".nv.info", ".nv.merc.nv.info"))):
                continue
            for _, attr, _value in attribute_entries(section.data(), f"{self.where}: {name}"):
                if attr not in ATTRIBUTES:
                    raise self.refuse("unknown_attribute", f"{name} holds attribute {attr:#x}")
                if attr in REFUSED_ATTRIBUTES:
                    raise self.refuse(REFUSED_ATTRIBUTES[attr], f"{name} holds {ATTRIBUTES[attr]}")
                seen.add(attr)
        return seen

    def _check_parameters(self, info, kernel: KernelDecl) -> tuple[int, ...]:
        expected = kernel.param_bytes + (8,) * SCRATCH_POINTERS
        if info is None:
            raise self.refuse("parameter_layout", f"no .nv.info.{kernel.entry} section")
        params, bank_size, cbank_size = {}, None, None
        for _, attr, value in attribute_entries(info.data(), self.where):
            if attr == KPARAM_INFO:
                if len(value) != 12:
                    raise self.refuse("malformed_info", f"a parameter entry of {len(value)} bytes")
                _, ordinal, offset, packed = struct.unpack("<IHHI", value)
                if ordinal in params:
                    raise self.refuse("parameter_layout", f"parameter {ordinal} is listed twice")
                params[ordinal] = (offset, packed >> 18)
            elif attr == CBANK_PARAM_SIZE:
                bank_size = value
            elif attr == PARAM_CBANK:
                if len(value) != 8:
                    raise self.refuse("malformed_info", f"a parameter bank entry of {len(value)} bytes")
                cbank_size = struct.unpack("<IHH", value)[2]
        sizes = tuple(params[i][1] for i in sorted(params))
        if sorted(params) != list(range(len(params))) or sizes != expected:
            raise self.refuse("parameter_layout", f"parameter sizes {list(sizes)}; the spec's parameters and "
                                                  f"{SCRATCH_POINTERS} scratch pointers give {list(expected)}")
        end = 0
        for ordinal in range(len(params)):
            offset, size = params[ordinal]
            at = -(-end // size) * size
            if offset != at:
                raise self.refuse("parameter_layout", f"parameter {ordinal} at offset {offset}, not {at}")
            end = at + size
        if bank_size != end or cbank_size != end:
            raise self.refuse("parameter_layout", f"a parameter bank of {bank_size} / {cbank_size} bytes; the "
                                                  f"parameters take {end}")
        return sizes

    def _check_block(self, info, kernel: KernelDecl) -> None:
        for _, attr, value in attribute_entries(info.data(), self.where):
            if attr == REQNTID:
                block = struct.unpack(f"<{len(value) // 4}I", value[:len(value) // 4 * 4])
                if tuple(block) != (32 * kernel.num_warps, 1, 1):
                    raise self.refuse("block_size", f"it requests a block of {list(block)}; num_warps "
                                                    f"{kernel.num_warps} gives [{32 * kernel.num_warps}, 1, 1]")


def target_capability(arch: str) -> int:
    """The compute capability Triton compiles `arch` for (90 for sm_90a)."""
    return TARGET_ARCHES[arch][1]
