# stages.sh: sourced by setup.sh, build.sh, run.sh and test.sh: stage lines for people, full
# output to log files, and on failure the log's relevant tail and its path.
#   stage TEXT                      "==> TEXT" (the script's name in front)
#   logged LOG COMMAND...           runs COMMAND with its output to LOG; on failure shows the tail
#   ninja_progress LOG              filters a ninja build's output (stdin): all of it to LOG, and
#                                   a live "[n/N]" line on a terminal, a line every ~10% otherwise
#   show_failure LOG [PATTERN]      the lines around the first PATTERN (else the last 40) and LOG

stage_prefix="${stage_prefix:-$(basename "${BASH_SOURCE[1]:-strata}" .sh)}"

stage() { printf '==> %s: %s\n' "$stage_prefix" "$*"; }

show_failure() {
  local log="$1" pattern="${2:-}" first=""
  [ -n "$pattern" ] && first=$(grep -n -m1 -E "$pattern" "$log" | cut -d: -f1)
  echo "---- ${log}: $([ -n "$first" ] && echo "from the first error" || echo "last 40 lines")" >&2
  if [ -n "$first" ]; then
    tail -n "+$first" "$log" | head -n 40 >&2
  else
    tail -n 40 "$log" >&2
  fi
  echo "---- full log: $log" >&2
}

logged() {
  local log="$1"
  shift
  mkdir -p "$(dirname "$log")"
  if ! "$@" >"$log" 2>&1; then
    show_failure "$log" 'error|Error|ERROR|FAILED'
    return 1
  fi
}

ninja_progress() {
  local log="$1" line n total msg shown=-1 tty=0
  [ -t 1 ] && tty=1
  : >"$log"
  while IFS= read -r line; do
    printf '%s\n' "$line" >>"$log"
    [[ "$line" =~ ^\[([0-9]+)/([0-9]+)\] ]] || continue
    n=${BASH_REMATCH[1]}
    total=${BASH_REMATCH[2]}
    if [ "$tty" = 1 ]; then
      msg="${line#*] }"
      printf '\r\033[K    [%s/%s] %s' "$n" "$total" "${msg:0:70}"
    elif [ $((n * 10 / total)) -gt "$shown" ]; then
      shown=$((n * 10 / total))
      printf '    [%s/%s] %d%%\n' "$n" "$total" $((n * 100 / total))
    fi
  done
  [ "$tty" = 1 ] && printf '\r\033[K'
  return 0
}
