"""Stand-ins for the command-line tools a script calls (kind, kubectl, tflaunch), and a runner.

The scripts under scripts/ drive a cluster through these tools. Here each tool is one small
Python program that appends its call (argv and KUBECONFIG) to a log and answers from a list
of rules, so a test can play a scenario (the job succeeds, fails, never finishes) and then
read what the script called, in order. No Docker, no cluster, no network.

A rule matches a call to its tool whose arguments include all of the rule's words; the first
matching rule answers. Its answers are given in turn to successive calls it matches, the last
one repeating: that is how a tool's answer changes over time (a job's objects are listed,
then they are gone). A call no rule matches prints nothing and exits 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tests.infra._infra import REPO

STUB = textwrap.dedent(
    """\
    #!{python} -S
    import json, os, sys, time
    tool = os.path.basename(sys.argv[0])
    args = sys.argv[1:]
    rules = json.loads(os.environ["STUB_RULES"])

    def rule_for(tool, args):
        for number, rule in enumerate(rules):
            if rule["tool"] == tool and all(word in args for word in rule["words"]):
                return number
        return None

    log_path = os.environ["STUB_LOG"]
    earlier = []
    if os.path.exists(log_path):
        with open(log_path) as log:
            earlier = [json.loads(line) for line in log]
    with open(log_path, "a") as log:
        log.write(json.dumps({{"tool": tool, "args": args,
                              "kubeconfig": os.environ.get("KUBECONFIG")}}) + "\\n")
    number = rule_for(tool, args)
    if number is None:
        sys.exit(0)
    seen = sum(1 for call in earlier if rule_for(call["tool"], call["args"]) == number)
    answers = rules[number]["answers"]
    answer = answers[min(seen, len(answers) - 1)]
    time.sleep(answer["sleep"])
    sys.stdout.write(answer["stdout"])
    sys.exit(answer["status"])
    """
)

USERS_KUBECONFIG = "/the/users/own/kubeconfig"
"""KUBECONFIG in the scripts' environment: a script must never talk to the user's cluster."""


@dataclass(frozen=True)
class Answer:
    """What a stand-in does for one call: print, then exit with a status."""

    stdout: str = ""
    status: int = 0
    sleep: float = 0.0
    """Seconds to take first, as a real command does before it times out."""


def rule(tool: str, words: str, *answers: Answer) -> dict[str, Any]:
    """Answer calls to TOOL whose arguments include every one of WORDS (space-separated)."""
    return {
        "tool": tool,
        "words": words.split(),
        "answers": [asdict(a) for a in answers or (Answer(),)],
    }


@dataclass
class Run:
    """A finished run of a script: its exit status, its stderr and every tool call it made."""

    status: int
    stderr: str
    calls: list[dict[str, Any]]
    artifacts: Path

    def argvs(self, tool: str) -> list[list[str]]:
        return [list(call["args"]) for call in self.calls if call["tool"] == tool]

    def called(self, tool: str, *prefix: str) -> bool:
        return any(argv[: len(prefix)] == list(prefix) for argv in self.argvs(tool))

    def index(self, tool: str, *prefix: str) -> int:
        """Position of the first call to TOOL starting with PREFIX among all calls."""
        for i, call in enumerate(self.calls):
            if call["tool"] == tool and call["args"][: len(prefix)] == list(prefix):
                return i
        raise AssertionError(f"no call `{tool} {' '.join(prefix)}` in {self.calls}")


def run_with_stubs(
    tmp_path: Path,
    script: str,
    *,
    tools: Iterable[str],
    rules: Sequence[dict[str, Any]],
    env: Mapping[str, str],
    unset: Iterable[str] = (),
) -> Run:
    """Run `bash SCRIPT` from the repository with stand-ins for TOOLS answering by RULES.

    Each tool's path is passed as its upper-case variable (KIND=.../kind), ARTIFACTS is a
    fresh directory, PYTHON the interpreter running the tests, and KUBECONFIG points at the
    user's own file. ENV is added on top; UNSET names variables the caller's environment
    must not leak into the script (its settings, so that the script's defaults apply).
    """
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in tools:
        stub = bin_dir / tool
        stub.write_text(STUB.format(python=sys.executable))
        stub.chmod(0o755)
    log = tmp_path / "calls.jsonl"
    artifacts = tmp_path / "artifacts"
    full_env = {k: v for k, v in os.environ.items() if k not in set(unset)}
    full_env.update(
        {
            "STUB_LOG": str(log),
            "STUB_RULES": json.dumps(list(rules)),
            "ARTIFACTS": str(artifacts),
            "PYTHON": sys.executable,
            "KUBECONFIG": USERS_KUBECONFIG,
            **{tool.upper(): str(bin_dir / tool) for tool in tools},
            **env,
        }
    )
    result = subprocess.run(
        ["bash", script],
        cwd=REPO,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    calls = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
    return Run(result.returncode, result.stderr, calls, artifacts)
