#!/usr/bin/env python3
"""Pack a directory as a one-layer OCI image archive that `ctr images import` reads.

The real node (hack/node.sh) has no registry to pull from, so its sandbox (pause) image and
the smoke-test image are made here from files on this machine. Standard library only: it
runs before any virtualenv exists. The archive is reproducible: every file is owned by root
with mtime 0, so the same files give the same image digest.

    hack/oci-archive.py ROOTFS NAME OUT.tar [--entrypoint ARG ...] [--user UID]

NAME is the full reference containerd stores (e.g. tflaunch.dev/pause:1).
"""

from __future__ import annotations

import argparse
import hashlib
import io
import json
import os
import tarfile
from pathlib import Path


def _layer(rootfs: Path) -> bytes:
    """An uncompressed tar of `rootfs`, entries sorted, owned by root, mtime 0."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for dirpath, dirnames, filenames in os.walk(rootfs):
            dirnames.sort()
            for name in sorted([*dirnames, *filenames]):
                path = Path(dirpath) / name
                info = tar.gettarinfo(str(path), arcname=str(path.relative_to(rootfs)))
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
                info.mtime = 0
                if info.isfile():
                    with path.open("rb") as handle:
                        tar.addfile(info, handle)
                else:
                    tar.addfile(info)
    return buffer.getvalue()


def _blob(tar: tarfile.TarFile, data: bytes, media_type: str) -> dict[str, object]:
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}


def _json(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":")).encode()


def pack(rootfs: Path, name: str, out: Path, entrypoint: list[str], user: str | None) -> None:
    layer = _layer(rootfs)
    config: dict[str, object] = {"Env": ["PATH=/usr/local/bin:/usr/bin:/bin:/sbin"]}
    if entrypoint:
        config["Entrypoint"] = entrypoint
    if user:
        config["User"] = user
    image_config = {
        "architecture": "amd64",
        "os": "linux",
        "config": config,
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(layer).hexdigest()}"]},
    }
    tmp = out.with_name(f".{out.name}.tmp")
    with tarfile.open(tmp, mode="w") as tar:
        layer_desc = _blob(tar, layer, "application/vnd.oci.image.layer.v1.tar")
        config_desc = _blob(tar, _json(image_config), "application/vnd.oci.image.config.v1+json")
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": config_desc,
            "layers": [layer_desc],
        }
        manifest_desc = _blob(tar, _json(manifest), "application/vnd.oci.image.manifest.v1+json")
        tag = name.rsplit(":", 1)[1] if ":" in name.rsplit("/", 1)[-1] else "latest"
        manifest_desc["annotations"] = {
            "io.containerd.image.name": name,
            "org.opencontainers.image.ref.name": tag,
        }
        index = {"schemaVersion": 2, "manifests": [manifest_desc]}
        for entry, data in (
            ("oci-layout", _json({"imageLayoutVersion": "1.0.0"})),
            ("index.json", _json(index)),
        ):
            info = tarfile.TarInfo(entry)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    tmp.replace(out)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rootfs", type=Path)
    parser.add_argument("name")
    parser.add_argument("out", type=Path)
    parser.add_argument("--entrypoint", nargs="*", default=[])
    parser.add_argument("--user")
    args = parser.parse_args()
    pack(args.rootfs, args.name, args.out, args.entrypoint, args.user)


if __name__ == "__main__":
    main()
