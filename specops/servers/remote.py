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
# _code_at HOST PORT PATH [SECS]: the HTTP status code, 000 when nothing answers in SECS (3)
_code_at() {
  if command -v curl >/dev/null 2>&1; then
    c=$(curl -s -o /dev/null -m "${4:-3}" -w '%{http_code}' "http://$1:$2$3" 2>/dev/null); echo "${c:-000}"
  else ( exec 3<>"/dev/tcp/$1/$2" 2>/dev/null || { echo 000; exit 0; }
    printf 'GET %s HTTP/1.0\r\nHost: %s\r\n\r\n' "$3" "$1" >&3; l=""; read -r -t "${4:-3}" l <&3; set -- $l
    echo "${2:-000}" )
  fi
}
# _health_at HOST PORT [PATH] [SECS]; PATH: the tree's readiness endpoint (/ready on SGLang 0.5.20+)
_health_at() {
  p=${3:-/health}; c=$(_code_at "$1" "$2" "$p" "$4")
  [ "$c" = 404 ] && [ "$p" = /health ] && c=$(_code_at "$1" "$2" /ready "$4"); echo "$c"
}
_health() { _health_at 127.0.0.1 "$1" "$2" "$3"; }
_port_busy() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null; }
_gpu_pids() { command -v nvidia-smi >/dev/null 2>&1 && timeout 10 nvidia-smi --query-compute-apps=pid --format=csv,noheader 2>/dev/null | tr -d ' '; }
"""


#: Seconds a status or reuse check waits for the readiness endpoint. SGLang's /health runs a
#: one-token generation (0.5.x: SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION, on by default), polls
#: for its answer once a second and gives up after SGLANG_HEALTH_CHECK_TIMEOUT (20 s) with a 503:
#: a healthy server on a busy host answers in seconds, so 3 s would call it "starting" (and a
#: re-deploy would restart it). A readiness watch keeps POLL_HEALTH_S: it asks again every poll.
HEALTH_PATIENCE_S = 25
POLL_HEALTH_S = 3


def q(value: object) -> str:
    return shlex.quote(str(value))
