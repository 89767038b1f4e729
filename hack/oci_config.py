"""Write the runc config.json of one run of an unpacked image, with the pods' restrictions.

`hack/images.sh run` unpacks an image archive once (umoci writes a bundle: rootfs/ and a
config.json from the image's USER, ENV, WORKDIR, ENTRYPOINT and CMD; skopeo writes the image
config beside it as image-config.json) and gives every run its own config.json from this
script, pointing at that shared rootfs. What the pods' securityContext asks of the kubelet
(launcher/core/templates/job.yaml.j2) is asked of runc here: the image's user, a read-only
root filesystem, /tmp and /checkpoints writable by that user (the pods' emptyDirs, and
fsGroup), no capabilities, no privilege escalation.

Usage: oci_config.py UNPACKED OUT MODE N_ENV [KEY=VALUE]*N_ENV [ARG...]
MODE cmd: ARGs replace the image's CMD and keep its ENTRYPOINT, as `docker run IMAGE ARG...`
does; MODE command: ARGs replace both, as a pod's `command` does (the rendered pods set it).
"""

from __future__ import annotations

import json
import sys

CAPABILITY_SETS = ("bounding", "effective", "inheritable", "permitted", "ambient")
WRITABLE = ("/tmp", "/checkpoints")


def main(argv: list[str]) -> None:
    unpacked, out, mode, n_env = argv[0], argv[1], argv[2], int(argv[3])
    if mode not in ("cmd", "command"):
        sys.exit(f"oci_config: MODE must be cmd or command, not {mode!r}")
    env, args = argv[4 : 4 + n_env], argv[4 + n_env :]
    with open(f"{unpacked}/config.json") as f:
        spec = json.load(f)
    with open(f"{unpacked}/image-config.json") as f:
        image = json.load(f)["config"]
    process = spec["process"]
    if args:
        process["args"] = args if mode == "command" else (image.get("Entrypoint") or []) + args
    process["env"] = process.get("env", []) + env
    process["terminal"] = False
    process["noNewPrivileges"] = True
    process["capabilities"] = {name: [] for name in CAPABILITY_SETS}
    spec["root"] = {"path": f"{unpacked}/rootfs", "readonly": True}
    spec["hostname"] = "tflaunch-image-run"
    # runc gives a tmpfs the mode of the directory it covers (0755 for one it creates, the
    # image's 1777 for /tmp), so the volume belongs to the image's user, as fsGroup makes the
    # pods' volumes theirs.
    owner = [f"uid={process['user']['uid']}", f"gid={process['user']['gid']}"]
    for target in WRITABLE:
        spec["mounts"].append(
            {
                "destination": target,
                "type": "tmpfs",
                "source": "tmpfs",
                "options": ["nosuid", "nodev", "size=1g", *owner],
            }
        )
    with open(out, "w") as f:
        json.dump(spec, f, indent=1)
    print(
        f"images: runc runs {' '.join(process['args'])!r} as uid {process['user']['uid']}",
        file=sys.stderr,
    )


if __name__ == "__main__":
    main(sys.argv[1:])
