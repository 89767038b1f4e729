#!/usr/bin/env bash
# Print the Debian archive this machine's apt uses (the first `deb` source whose path ends in
# /debian), so that debootstrap fetches from where apt already does: a mirror, a proxy or a
# snapshot that the machine is set up for. Reads deb822 sources (*.sources) and one-line ones.
set -euo pipefail

shopt -s nullglob
for file in /etc/apt/sources.list.d/*.sources; do
  awk '/^Types:/ {deb = ($0 ~ /(^|[ \t])deb([ \t]|$)/)}
       deb && /^URIs:/ {for (i = 2; i <= NF; i++) if ($i ~ /\/debian\/?$/) {print $i; exit}}' "$file"
done | head -n 1 | grep . && exit 0
for file in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
  [[ -r $file ]] || continue
  awk '$1 == "deb" {for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\// && $i ~ /\/debian\/?$/) {print $i; exit}}' "$file"
done | head -n 1 | grep . && exit 0
printf 'apt-mirror: no Debian archive in /etc/apt/sources.list(.d): set MIRROR to one\n' >&2
exit 1
