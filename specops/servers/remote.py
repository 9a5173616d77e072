"""Bash fragments run on the host: liveness, HTTP codes, port probes, GPU pids.

Every poll is one small script so that a check costs one round trip over SSH. Values
put into scripts are ints we produced or shlex-quoted strings.
"""

from __future__ import annotations

import shlex

#: Defined at the top of every lifecycle script.
FUNCS = r"""
_start() { [ -r /proc/$1/stat ] && sed 's/.*) //' /proc/$1/stat 2>/dev/null | cut -d' ' -f20; }
_alive() {
  kill -0 "$1" 2>/dev/null || return 1
  case "$(ps -o stat= -p "$1" 2>/dev/null | tr -d ' ')" in Z*|'') return 1;; esac
  if [ -n "$2" ] && [ -r /proc/$1/stat ]; then [ "$(_start "$1")" = "$2" ] || return 1; fi
  return 0
}
_ours() { kill -0 "$1" 2>/dev/null || return 0; [ -z "$2" ] || [ ! -r /proc/$1/stat ] || [ "$(_start "$1")" = "$2" ]; }
_grp_alive() { ps -e -o pgid=,stat= 2>/dev/null | awk -v g="$1" '$1==g && $2 !~ /^Z/ {f=1} END {exit !f}'; }
_grp_pids() { ps -e -o pid=,pgid= 2>/dev/null | awk -v g="$1" '$2==g {print $1}'; }
_http_tcp() (
  exec 3<>"/dev/tcp/127.0.0.1/$1" 2>/dev/null || { echo 000; exit 0; }
  printf 'GET %s HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n' "$2" >&3
  l=""; read -r -t 3 l <&3; set -- $l; echo "${2:-000}"
)
_http() {
  if command -v curl >/dev/null 2>&1; then
    c=$(curl -s -o /dev/null -m 3 -w '%{http_code}' "http://127.0.0.1:$1$2" 2>/dev/null); echo "${c:-000}"
  else _http_tcp "$1" "$2"; fi
}
# $2: the tree's readiness endpoint (/ready on SGLang 0.5.20+, whose /health runs a generation)
_health() { p=${2:-/health}; c=$(_http "$1" "$p"); [ "$c" = 404 ] && [ "$p" = /health ] && c=$(_http "$1" /ready); echo "$c"; }
_port_busy() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }
_gpu_pids() { command -v nvidia-smi >/dev/null 2>&1 && timeout 10 nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | tr -d ' '; }
"""


def q(value: object) -> str:
    return shlex.quote(str(value))
