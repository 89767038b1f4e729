"""The lines the code must not cross (also checked statically by `make lint`: .importlinter)."""

from __future__ import annotations

import pkgutil
import subprocess
import sys

import launcher


def test_the_launcher_never_imports_tensorflow():
    modules = [m.name for m in pkgutil.walk_packages(launcher.__path__, "launcher.")]
    assert "launcher.cluster.client" in modules  # every package's modules, not only the top
    probe = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    try:\n"
        "        importlib.import_module(name)\n"
        "    except ImportError:\n"
        "        pass  # an optional extra (kopf) that is not installed\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'tensorflow', 'tf_keras', 'keras', 'trainer'})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_rendering_needs_no_kubernetes_client():
    probe = (
        "import sys\n"
        "from launcher.cli.main import run\n"
        "assert run(['render']) == 0\n"
        "print(any(m.split('.')[0] == 'kubernetes' for m in sys.modules), file=sys.stderr)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stderr.strip().endswith("False")
