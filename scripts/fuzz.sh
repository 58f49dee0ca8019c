#!/usr/bin/env bash
# fuzz.sh: builds the libFuzzer targets with clang (ASan + UBSan, coverage in strata_common)
# and fuzzes the wire codec on a copy of the seed corpus.
#   scripts/fuzz.sh [SECONDS] [LIBFUZZER_FLAGS...]   fuzz for SECONDS (default 120)
#   scripts/fuzz.sh --make-corpus                    rewrite the seeds in tests/fuzz/corpus/
#                                                    (regression-* inputs there are kept)
# Exits non-zero on a crash; the input that crashed is kept in $BUILD/fuzz-artifacts/.
# Environment: STRATA_FUZZ_BUILD (build folder, default build-fuzz), JOBS (default 2).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${STRATA_FUZZ_BUILD:-$root/build-fuzz}
jobs=${JOBS:-2}
corpus=$root/tests/fuzz/corpus

cmake -S "$root" -B "$build" -G Ninja \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DSTRATA_FUZZ=ON -DSTRATA_CUDA=OFF -DBUILD_TESTING=ON >/dev/null
cmake --build "$build" --target message_fuzzer make_corpus -j "$jobs"
bin=$build/tests/fuzz

if [[ "${1:-}" == "--make-corpus" ]]; then
  "$bin/make_corpus" "$corpus"
  exit 0
fi

seconds=${1:-120}
[[ $# -gt 0 ]] && shift
work=$(mktemp -d "${TMPDIR:-/tmp}/strata-fuzz-XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/corpus" "$build/fuzz-artifacts"
cp "$corpus"/* "$work/corpus/"

export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
echo "fuzz.sh: message_fuzzer for ${seconds}s on a copy of $corpus"
status=0
"$bin/message_fuzzer" -max_len=65536 -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
  -print_final_stats=1 -artifact_prefix="$build/fuzz-artifacts/" "$@" "$work/corpus" || status=$?
if [[ $status -ne 0 ]]; then
  echo "fuzz.sh: message_fuzzer failed (exit $status); inputs in $build/fuzz-artifacts/" >&2
  echo "fuzz.sh: reproduce with $bin/message_fuzzer <input>, shrink with -minimize_crash=1 -runs=10000" >&2
fi
exit $status
