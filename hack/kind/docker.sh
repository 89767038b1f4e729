#!/usr/bin/env bash
# A docker daemon for the kind rig on this machine, beside the real node (hack/node.sh), which
# it must never disturb:
#   - no iptables, no ip_forward, no masquerading (--iptables=false --ip-forward=false
#     --ip-masq=false): dockerd's defaults set the FORWARD policy to DROP and add chains,
#     which would cut the real node's pods off; kind's nodes need none of it (they talk on
#     one docker bridge; the host reaches them on that bridge and through docker-proxy);
#   - its own private mount namespace, where /run/containerd is a directory of its own (the
#     containerd shims keep their sockets under /run/containerd/s, a path the real node's
#     teardown unmounts and removes);
#   - its state under $STATE (data root, exec root, socket, pid, log), not /var/lib/docker.
# Debian's docker.io runs it (apt-get install docker.io); the client is any docker >= 20.10.
#
# Usage: docker.sh up | down | status | host
#   host: prints the DOCKER_HOST value (unix://$STATE/docker.sock).
set -euo pipefail

STATE=${TFLAUNCH_DOCKER_STATE:-/var/lib/tflaunch-docker}
SOCK=$STATE/docker.sock
PIDFILE=$STATE/dockerd.pid

log() { printf 'kind-docker: %s\n' "$*" >&2; }
die() { printf 'kind-docker: error: %s\n' "$*" >&2; exit 2; }

running() { [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null; }

up() {
  [[ $(id -u) -eq 0 ]] || die "dockerd needs root"
  command -v dockerd >/dev/null || die "dockerd not found: apt-get install docker.io"
  if running && DOCKER_HOST=unix://$SOCK docker version >/dev/null 2>&1; then
    log "dockerd is up ($SOCK)"; return 0
  fi
  mkdir -p "$STATE/data" "$STATE/exec" "$STATE/run-containerd"
  local start=$SECONDS
  # unshare: a private mount namespace; /run/containerd bound to a directory of ours in it.
  # shellcheck disable=SC2016  # expanded by the inner sh, from its $1
  nohup unshare --mount --propagation private sh -c '
    mount --bind "$1/run-containerd" /run/containerd 2>/dev/null ||
      { mkdir -p /run/containerd && mount --bind "$1/run-containerd" /run/containerd; }
    exec dockerd --data-root "$1/data" --exec-root "$1/exec" --host "unix://$1/docker.sock" \
      --pidfile "$1/dockerd.pid" --iptables=false --ip6tables=false --ip-forward=false \
      --ip-masq=false --bridge=none --storage-driver=overlay2 --log-level=warn
  ' sh "$STATE" >"$STATE/dockerd.log" 2>&1 &
  for _ in $(seq 1 120); do
    DOCKER_HOST=unix://$SOCK docker version >/dev/null 2>&1 && { log "dockerd up in $((SECONDS - start)) s ($SOCK)"; return 0; }
    sleep 0.5
  done
  tail -20 "$STATE/dockerd.log" >&2
  die "dockerd did not answer on $SOCK in 60 s (log: $STATE/dockerd.log)"
}

down() {
  running || { log "dockerd is not running"; return 0; }
  local pid
  pid=$(cat "$PIDFILE")
  kill "$pid"
  for _ in $(seq 1 60); do kill -0 "$pid" 2>/dev/null || { log "dockerd stopped"; return 0; }; sleep 0.5; done
  die "dockerd (pid $pid) did not stop in 30 s"
}

case ${1:-} in
  up) up ;;
  down) down ;;
  status)
    if running; then echo "dockerd up (pid $(cat "$PIDFILE"), $SOCK)"; else echo "dockerd down"; exit 1; fi ;;
  host) echo "unix://$SOCK" ;;
  *) die "usage: docker.sh up | down | status | host" ;;
esac
