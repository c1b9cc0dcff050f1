#!/usr/bin/env python3
"""A CycloneDX 1.5 SBOM (JSON) of the atoll binary for one target: every crate compiled into
it (atoll's normal dependencies for that platform, from `cargo metadata --locked`), with its
version, package URL, licence expression and the SHA-256 of its crates.io archive (from
Cargo.lock), the dependency graph, and the Rust standard library it was built with.
Reproducible: the time is SOURCE_DATE_EPOCH's and the serial number derives from the commit.

    cross/sbom.py TARGET VERSION COMMIT > atoll-VERSION-TARGET.cdx.json
"""
import datetime
import json
import os
import subprocess
import sys
import tomllib
import uuid


def purl(p):
    return f"pkg:cargo/{p['name']}@{p['version']}"


def main():
    target, version, commit = sys.argv[1:4]
    meta = json.loads(
        subprocess.check_output(
            ["cargo", "metadata", "--locked", "--format-version", "1", "--filter-platform", target]
        )
    )
    with open("Cargo.lock", "rb") as f:
        lock = tomllib.load(f)
    checksums = {(p["name"], p["version"]): p.get("checksum") for p in lock["package"]}
    packages = {p["id"]: p for p in meta["packages"]}
    nodes = {n["id"]: n for n in meta["resolve"]["nodes"]}
    root = meta["resolve"]["root"]

    # What is linked into the binary: the normal dependencies. What builds it (build scripts'
    # dependencies, such as cc for ring's C) is listed too, with the scope "excluded". Tests'
    # dependencies are not.
    def linked(node, kinds=(None,)):
        for d in node["deps"]:
            if any(k["kind"] in kinds for k in d["dep_kinds"]):
                yield d["pkg"]

    def closure(start, kinds):
        seen, todo = set(), list(start)
        while todo:
            pid = todo.pop()
            if pid not in seen:
                seen.add(pid)
                todo.extend(linked(nodes[pid], kinds))
        return seen

    seen = closure([root], (None,))
    tools = closure(seen, (None, "build")) - seen

    def component(pid):
        p = packages[pid]
        c = {"type": "library", "bom-ref": purl(p), "name": p["name"], "version": p["version"], "purl": purl(p)}
        if p.get("license"):
            c["licenses"] = [{"expression": p["license"]}]
        sha = checksums.get((p["name"], p["version"]))
        if sha:
            c["hashes"] = [{"alg": "SHA-256", "content": sha}]
        return c

    rustc = subprocess.check_output(["rustc", "-V"], text=True).split()[1]
    std = {
        "type": "library",
        "bom-ref": f"pkg:generic/rust-std@{rustc}",
        "name": "rust-std",
        "version": rustc,
        "description": "The Rust standard library (core, alloc, std), built from source with the binary",
        "licenses": [{"expression": "MIT OR Apache-2.0"}],
        "purl": f"pkg:generic/rust-std@{rustc}",
    }
    atoll = component(root) | {"type": "application"}
    when = datetime.datetime.fromtimestamp(int(os.environ.get("SOURCE_DATE_EPOCH", "0")), datetime.timezone.utc)
    bom = {
        "bomFormat": "CycloneDX",
        "specVersion": "1.5",
        "serialNumber": f"urn:uuid:{uuid.uuid5(uuid.NAMESPACE_URL, f'atoll/{commit}/{target}')}",
        "version": 1,
        "metadata": {
            "timestamp": when.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "tools": {"components": [{"type": "application", "name": "atoll cross/sbom.py"}]},
            "component": atoll,
            "properties": [
                {"name": "atoll:target", "value": target},
                {"name": "atoll:commit", "value": commit},
            ],
        },
        "components": sorted(
            [component(pid) for pid in seen if pid != root]
            + [component(pid) | {"scope": "excluded"} for pid in tools],
            key=lambda c: c["bom-ref"],
        )
        + [std],
        "dependencies": sorted(
            (
                {
                    "ref": purl(packages[pid]),
                    "dependsOn": sorted(purl(packages[d]) for d in set(linked(nodes[pid], (None, "build")))),
                }
                for pid in seen | tools
            ),
            key=lambda d: d["ref"],
        ),
    }
    if version != atoll["version"]:
        sys.exit(f"sbom: Cargo.toml says {atoll['version']}, not {version}")
    json.dump(bom, sys.stdout, indent=1, sort_keys=True)
    print()


main()
