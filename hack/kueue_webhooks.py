"""Kueue's webhook configurations pointed at a manager running on this host.

Kueue ships them (config/components/webhook/manifests.yaml) for a manager in the cluster,
behind a Service. hack/kueue.sh runs the manager as a host process instead, so each
webhook's clientConfig becomes `url: https://127.0.0.1:PORT/<its path>` with the CA that
signed the manager's certificate. Only the webhooks of Kueue's own kinds and of batch/v1 Jobs
are kept: the others (pods, deployments, ...) belong to integrations that are not enabled, and
with failurePolicy Fail would route every pod of the cluster through this process.

Usage: kueue_webhooks.py PORT CA_FILE < manifests.json > webhooks.json
(stdin: `kubectl create --dry-run=client -o json` of the YAML: one JSON document each.)
"""

from __future__ import annotations

import base64
import json
import sys

GROUPS = {"kueue.x-k8s.io", "batch"}


def kept(webhook: dict) -> bool:
    groups = {g for rule in webhook.get("rules") or [] for g in rule.get("apiGroups") or []}
    return bool(groups) and groups <= GROUPS


def main(port: str, ca_file: str) -> None:
    with open(ca_file, "rb") as handle:
        ca = base64.b64encode(handle.read()).decode()
    text, decoder, at, items = sys.stdin.read(), json.JSONDecoder(), 0, []
    while text[at:].strip():  # kubectl prints one JSON document per object
        at += len(text[at:]) - len(text[at:].lstrip())
        data, at = decoder.raw_decode(text, at)
        items.extend(data.get("items", [data]))
    for item in items:
        hooks = [w for w in item.get("webhooks") or [] if kept(w)]
        for hook in hooks:
            path = hook["clientConfig"]["service"]["path"]
            hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}{path}", "caBundle": ca}
            hook["timeoutSeconds"] = 10
        item["webhooks"] = hooks
        item["metadata"] = {"name": f"kueue-{item['metadata']['name']}"}
    json.dump({"apiVersion": "v1", "kind": "List", "items": items}, sys.stdout)


if __name__ == "__main__":
    main(*sys.argv[1:3])
