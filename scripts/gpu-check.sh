#!/usr/bin/env bash
# gpu-check.sh: the GPU checks (issue #15) in two halves, for a GPU machine that has CUDA's
# driver and libraries (cuBLAS, NCCL: PyTorch's wheels carry them) but no Debian packages, no
# apt and no network, so everything strata needs is built here and carried there.
#
#   scripts/gpu-check.sh bundle [FILE]       here: builds with CUDA (build/) and packs FILE
#                                            (default gpu-bundle/strata.tar.xz): the stripped
#                                            binaries and gpu test binaries, and the shared
#                                            libraries they load (their ldd closure) minus
#                                            CUDA's and the C library's
#   scripts/gpu-check.sh run [FILE] [OUT]    there, from the repository root: unpacks FILE, finds
#                                            cuBLAS 13 and NCCL on the machine, and writes into OUT
#                                            (default gpu-results/): summary.txt, steps.jsonl (each
#                                            step's exit status and time) and logs.tar.gz
#
# `run` does, in this order, each step with its own time limit and all of them within a budget
# (STRATA_GPU_BUDGET_S, 540 s: the device tool's calls last at most 600), going on after a
# failure (summary.txt says which, with the end of its log):
#   1. every gpu-labelled test (gpu_tests, trainer_gpu_tests), JSON reports;
#   2. 20 steps of mlp and gpt on one process, train.device cpu and cuda: the largest relative
#      difference of the losses (fp32 on both sides, so within fp32 tolerance, not bit-equal);
#      and cuda with train.matmul_precision tf32 and bf16; and train.precision bf16 on cpu and
#      cuda, against each other;
#   3. strata-bench step on GPT-2 small's shapes beside PyTorch eager on the same GPU (MFU against
#      --peak-tflops, 989: an H100/H200's bf16 dense), PyTorch with the machine's own libraries,
#      at each matmul precision (fp32, tf32, bf16);
#   4. ctr on a cluster (2 servers, 2 trainers sharing the GPU): sync ps on cpu and cuda, hybrid on
#      cuda (one trainer where there is one GPU: NCCL takes one rank per device): the AUCs; gpt
#      offloaded to 2 servers with bf16 wire and precision, on cpu and cuda: the losses;
#      strata-bench ops --device cuda, and at GPT-2 small's block shapes with bf16 matmuls;
#   5. strata-bench ps (dense 1 and 16 MiB, sparse 1M keys of dim 1) on the machine's cores.
# Environment: STRATA_BUILD_DIR (bundle; default build/), STRATA_GPU_BUDGET_S (540),
# STRATA_GPU_PEAK_TFLOPS (989), STRATA_GPU_STEP_ARGS (the step bench's shape flags; default GPT-2
# small's).
# On the device tool: carry gpu-bundle, run `bash scripts/gpu-check.sh run gpu-bundle/strata.tar.xz $OUT`.
set -uo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
what="${1:-}"

die() { echo "gpu-check.sh: $*" >&2; exit 2; }

# The shared libraries `files` load, except CUDA's (the GPU machine's own must match its driver)
# and the C library's (the loader's own).
closure() {
  ldd "$@" 2>/dev/null | awk '/=> \// {print $3}' | sort -u |
    grep -Ev '/(libcuda|libcudart|libcublas|libcublasLt|libnccl|libnvidia)[^/]*$' |
    grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux-x86-64|libresolv)\.so' || true
}

bundle() {
  local out="${1:-$repo/gpu-bundle/strata.tar.xz}"
  local build="${STRATA_BUILD_DIR:-$repo/build}"
  [ -x /usr/local/cuda/bin/nvcc ] || die "bundle: no CUDA toolkit at /usr/local/cuda (nvcc): the CUDA path cannot be built here"
  STRATA_BUILD_DIR="$build" bash "$repo/scripts/build.sh" -DSTRATA_CUDA=ON || die "bundle: the build failed"
  local stage
  stage="$(mktemp -d)"
  mkdir -p "$stage/strata/bin" "$stage/strata/lib"
  local bins=(strata-launch strata-scheduler strata-server strata-trainer strata-bench)
  for b in "${bins[@]}"; do
    [ -x "$build/bin/$b" ] || die "bundle: $build/bin/$b was not built"
    strip -o "$stage/strata/bin/$b" "$build/bin/$b"
  done
  for t in gpu_tests trainer/trainer_gpu_tests; do
    [ -x "$build/tests/$t" ] || die "bundle: $build/tests/$t was not built (is CUDA on?)"
    strip -o "$stage/strata/bin/$(basename "$t")" "$build/tests/$t"
  done
  for lib in $(closure "$stage"/strata/bin/*); do cp -L "$lib" "$stage/strata/lib/"; done
  mkdir -p "$(dirname "$out")"
  tar -C "$stage" -cJf "$out" strata
  rm -rf "$stage"
  echo "gpu-check.sh: $out ($(du -h "$out" | cut -f1)); carry it to the GPU machine and run: scripts/gpu-check.sh run $out"
}

# The folder of the first file named `name` under the places CUDA's libraries live on a GPU
# machine: the toolkit, the driver's folder, and Python's site-packages (PyTorch's wheels).
find_lib() {
  local name="$1" roots=(/usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets /usr/local/nvidia
                         /usr/lib/x86_64-linux-gnu /opt /usr/local/lib /usr/lib/python3)
  local py
  py="$(command -v python3 || true)"
  [ -n "$py" ] && roots+=("$("$py" -c 'import site; print(" ".join(site.getsitepackages()))' 2>/dev/null)")
  # shellcheck disable=SC2068
  find ${roots[@]} -name "$name" \( -type f -o -type l \) 2>/dev/null | head -1 | xargs -r dirname
}

# step NAME SECONDS COMMAND...: runs COMMAND with a time limit (cut to what is left of the run's
# budget), its output in logs/NAME.log, and records the outcome for the summary.
step() {
  local name="$1" limit="$2"
  shift 2
  local left=$((deadline - SECONDS - 20))  # 20 s kept for the summary and the packing
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 5 ]; then
    printf '%-28s %-34s\n' "$name" "SKIPPED (the run's budget is spent)" | tee -a "$out/summary.txt" >&2
    echo "{\"step\": \"$name\", \"rc\": null, \"seconds\": 0}" >>"$logs/steps.jsonl"
    return 0
  fi
  local started=$SECONDS
  echo "==> $name (at most $limit s)" >&2
  timeout --kill-after=10 "$limit" "$@" >"$logs/$name.log" 2>&1
  local rc=$?
  local took=$((SECONDS - started))
  local verdict=ok
  [ "$rc" -eq 0 ] || verdict="FAILED (exit $rc$([ "$rc" -eq 124 ] && echo ", past ${limit} s"))"
  printf '%-28s %-34s %4d s\n' "$name" "$verdict" "$took" | tee -a "$out/summary.txt" >&2
  [ "$rc" -eq 0 ] || sed 's/^/    /' <(grep -v '^\s*$' "$logs/$name.log" | tail -2) | tee -a "$out/summary.txt" >&2
  echo "{\"step\": \"$name\", \"rc\": $rc, \"seconds\": $took}" >>"$logs/steps.jsonl"
  return 0
}

run() {
  local file="${1:-$repo/gpu-bundle/strata.tar.xz}"
  out="${2:-$repo/gpu-results}"
  deadline=$((SECONDS + ${STRATA_GPU_BUDGET_S:-540}))
  [ -f "$file" ] || die "run: no bundle $file (make it with: scripts/gpu-check.sh bundle)"
  mkdir -p "$out" || die "run: cannot make $out"
  out="$(cd "$out" && pwd)"
  rm -f "$out/summary.txt" "$out/steps.jsonl" "$out/logs.tar.gz"
  local root
  root="$(mktemp -d)"
  # Only three files land in OUT (the device tool brings back a few files, not folders of them).
  logs="$root/logs"
  mkdir -p "$logs"
  tar -C "$root" -xJf "$file" || die "run: cannot unpack $file"
  local b="$root/strata/bin"
  local cublas nccl cudart python
  cublas="$(find_lib 'libcublas.so.13')"
  nccl="$(find_lib 'libnccl.so.2')"
  cudart="$(find_lib 'libcudart.so.13')"
  python="$(command -v python3 || echo /usr/bin/python3)"
  # PyTorch (the step bench's peer) runs with this machine's own libraries, not the bundle's.
  printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "%s" "$@"\n' "${LD_LIBRARY_PATH:-}" "$python" >"$root/python3"
  chmod +x "$root/python3"
  export LD_LIBRARY_PATH="$root/strata/lib${cudart:+:$cudart}${cublas:+:$cublas}${nccl:+:$nccl}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  # The examples' text, or the repository's docs where this machine has no licence texts.
  local text=/usr/share/common-licenses/GPL-3
  [ -f "$text" ] || { text="$root/text.txt"; cat "$repo"/docs/*.md "$repo"/README.md >"$text"; }
  {
    echo "gpu-check.sh run, $(date -u +%FT%TZ), bundle $(basename "$file")"
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || echo "no nvidia-smi"
    echo "glibc $(ldd --version 2>/dev/null | head -1 | awk '{print $NF}'); cuBLAS from ${cublas:-NOT FOUND}; NCCL from ${nccl:-NOT FOUND}; cudart from ${cudart:-NOT FOUND}; python $python"
  } | tee "$out/summary.txt" >&2
  ldd "$b/strata-trainer" >"$logs/ldd.log" 2>&1
  grep -q "not found" "$logs/ldd.log" && echo "missing libraries: $(grep 'not found' "$logs/ldd.log" | awk '{print $1}' | tr '\n' ' ')" | tee -a "$out/summary.txt" >&2
  : >"$logs/steps.jsonl"

  # 1. The gpu tests.
  step gpu_tests 120 "$b/gpu_tests" --gtest_output="json:$logs/gpu_tests.json"
  step trainer_gpu_tests 180 "$b/trainer_gpu_tests" --gtest_output="json:$logs/trainer_gpu_tests.json"

  # 2. One process, cpu against cuda, 20 steps of each model.
  local equal=(--set sync.mode=local --set train.steps=20 --set train.log_every=1 --set train.checkpoint_every=0
               --set train.progress=false --set "sync.trace_path=''")
  # Then cuda with the tensor cores' matmul precisions (train.matmul_precision tf32, bf16):
  # within their rounding of the cpu run, not fp32's.
  for model in mlp gpt; do
    local data=()
    [ "$model" = gpt ] && data=(--set "data.path=$text")
    # cpu-precision_bf16 and cuda-precision_bf16: train.precision bf16 (bf16 matmuls, activations
    # saved in bf16) on both, compared with each other.
    for dev in cpu cuda cuda-tf32 cuda-bf16 cpu-precision_bf16 cuda-precision_bf16; do
      local precision=fp32 whole=fp32
      case "$dev" in
        *-precision_bf16) whole=bf16 ;;
        cuda-*) precision="${dev#cuda-}" ;;
      esac
      step "$model-$dev" 90 "$b/strata-trainer" -c "$repo/examples/$model.yaml" "${equal[@]}" "${data[@]}" \
        --set "train.device=${dev%%-*}" --set "train.matmul_precision=$precision" --set "train.precision=$whole" \
        --set "train.metrics_path=$logs/$model-$dev.jsonl"
    done
  done

  # 3. A training step on GPT-2 small's shapes beside PyTorch eager on the same GPU, at each
  # matmul precision (PyTorch: fp32, TF32 allowed, bf16 autocast).
  for precision in fp32 tf32 bf16; do
    # shellcheck disable=SC2086
    step "bench-step-$precision" 150 "$b/strata-bench" step --device cuda \
      ${STRATA_GPU_STEP_ARGS:---layers 12 --width 768 --heads 12 --context 1024 --batch 8 --vocab 50304} \
      --steps 20 --warmup 5 --matmul-precision "$precision" --peak-tflops "${STRATA_GPU_PEAK_TFLOPS:-989}" \
      --data "$text" --python "$root/python3" --script "$repo/tools/bench/torch_gpt_train.py" \
      --json "$logs/bench-step-$precision.json"
  done

  # 4. ctr through the parameter servers, both trainers on the GPU; then the ops.
  # hybrid all-reduces its dense gradients over NCCL, which refuses two ranks of a group on one
  # device ("Duplicate GPU detected"): on a one-GPU machine its group is of one trainer.
  for run in ps-cpu ps-cuda hybrid-cuda; do
    local trainers=2
    [ "$run" = hybrid-cuda ] && [ "$(nvidia-smi -L 2>/dev/null | wc -l)" -lt 2 ] && trainers=1
    step "ctr-$run" 120 "$b/strata-launch" --servers 2 --trainers "$trainers" --timeout 110 "$repo/examples/ctr.yaml" \
      --set train.steps=1000 --set "sync.mode=${run%-*}" --set "train.device=${run#*-}" \
      --set "server.store.path=$root/ctr-store-$run" \
      --set "train.metrics_path=$logs/ctr-$run-{rank}.jsonl"
  done
  # gpt through the servers (offload, one trainer) with bf16 on the wire and train.precision bf16:
  # the weights held in bf16 on the device between uses; cpu and cuda, compared in the summary.
  for dev in cpu cuda; do
    step "gpt_offload-$dev" 120 "$b/strata-launch" --servers 2 --trainers 1 --timeout 110 "$repo/examples/gpt_offload.yaml" \
      --set train.steps=20 --set train.log_every=1 --set "data.path=$text" --set sync.wire=bf16 --set train.precision=bf16 \
      --set "train.device=$dev" --set "sync.trace_path=''" --set "train.metrics_path=$logs/gpt_offload-$dev-{rank}.jsonl"
  done
  step bench-ops 120 "$b/strata-bench" ops --device cuda --json "$logs/bench-ops.json"
  # One block's ops at the step bench's shapes, bf16 matmuls: where a step's time goes.
  step bench-ops-gpt2 120 "$b/strata-bench" ops --device cuda --gemm-sizes 1024 --batch 8 --context 1024 \
    --vocab 50304 --matmul-precision bf16 --json "$logs/bench-ops-gpt2.json"
  # 5. The parameter server's data path on this machine's many cores (issue #22's goals, which a
  # 2-core host cannot settle: there the receiver's SGD or copy has no core to itself).
  step bench-ps 90 "$b/strata-bench" ps --servers 1 --dense-sizes 1MiB,16MiB --batches 1000 --dims 1 \
    --wide-batches 1000000 --wide-dims 1 --json "$logs/bench-ps.json"

  "$python" "$repo/scripts/gpu_check_summary.py" "$logs" >>"$out/summary.txt" 2>&1 ||
    echo "the summary script failed (logs.tar.gz has the logs)" >>"$out/summary.txt"
  cp "$logs/steps.jsonl" "$out/steps.jsonl"
  tar -C "$root" -czf "$out/logs.tar.gz" logs
  rm -rf "$root"
  echo "gpu-check.sh: results in $out (summary.txt, steps.jsonl, logs.tar.gz)" >&2
  cat "$out/summary.txt"
}

case "$what" in
  bundle) shift; bundle "$@" ;;
  run) shift; run "$@" ;;
  *) die "usage: scripts/gpu-check.sh bundle [FILE] | run [FILE] [OUT]" ;;
esac
