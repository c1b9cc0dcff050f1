#!/usr/bin/env python3
"""Prints the dependency list a binary carries in cargo-auditable's format (the `.dep-v0`
ELF section: zlib-compressed JSON, what `cargo audit bin`, trivy and syft read), one
`name version (source)` per line; exits 1 when the section is missing or does not decode.
Reads 32- and 64-bit little-endian ELF of any architecture.

    cross/deps.py BINARY
"""
import json
import struct
import sys
import zlib


def section(path, wanted):
    with open(path, "rb") as f:
        elf = f.read()
    if elf[:4] != b"\x7fELF" or elf[5] != 1:
        sys.exit(f"{path}: not a little-endian ELF file")
    wide = elf[4] == 2
    if wide:
        shoff, = struct.unpack_from("<Q", elf, 0x28)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x3A)
    else:
        shoff, = struct.unpack_from("<I", elf, 0x20)
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", elf, 0x2E)

    def header(i):
        at = shoff + i * shentsize
        if wide:
            name, _, _, _, off, size = struct.unpack_from("<IIQQQQ", elf, at)
        else:
            name, _, _, _, off, size = struct.unpack_from("<IIIIII", elf, at)
        return name, off, size

    _, stroff, _ = header(shstrndx)
    for i in range(shnum):
        name, off, size = header(i)
        end = elf.index(b"\0", stroff + name)
        if elf[stroff + name:end].decode() == wanted:
            return elf[off:off + size]
    return None


def main():
    data = section(sys.argv[1], ".dep-v0")
    if data is None:
        sys.exit(f"{sys.argv[1]}: no .dep-v0 section (not built with cargo auditable)")
    packages = json.loads(zlib.decompress(data))["packages"]
    for p in packages:
        print(f"{p['name']} {p['version']} ({p.get('source', '?')})")


main()
