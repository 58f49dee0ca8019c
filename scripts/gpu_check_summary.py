"""gpu_check_summary.py: the figures of a `scripts/gpu-check.sh run`, from its logs folder, as
text: the gpu tests' counts and failures, the CUDA-against-CPU loss differences of each model,
ctr's AUC through the servers on each device, and the benchmarks' tables.

    python3 scripts/gpu_check_summary.py LOGS
"""
import glob
import json
import os
import sys


def gtest(path):
    with open(path) as f:
        report = json.load(f)
    passed, skipped, failed = 0, 0, []
    for suite in report.get("testsuites", []):
        for t in suite.get("testsuite", []):
            name = suite["name"] + "." + t["name"]
            if t.get("failures"):
                failed.append(name)
            elif t.get("result") == "SKIPPED":
                skipped += 1
            else:
                passed += 1
    return passed, skipped, failed


def records(path, key):
    out = {}
    if os.path.exists(path):
        with open(path) as f:
            for line in f:
                try:
                    j = json.loads(line)
                except ValueError:
                    continue
                if key in j and "step" in j:
                    out[j["step"]] = j[key]
    return out


def main():
    logs = sys.argv[1]
    print("\n== gpu tests")
    for path in sorted(glob.glob(os.path.join(logs, "*gpu_tests.json"))):
        passed, skipped, failed = gtest(path)
        print(f"{os.path.basename(path)}: {passed} passed, {skipped} skipped, {len(failed)} failed")
        for name in failed:
            print(f"  FAILED {name}")
    print("\n== one process, train.device cuda against cpu (losses of the same steps)")
    for model in ("mlp", "gpt"):
        cpu = records(os.path.join(logs, f"{model}-cpu.jsonl"), "loss")
        # cuda (fp32 matmuls) first, then the tensor cores' precisions (cuda-tf32, cuda-bf16).
        runs = sorted(glob.glob(os.path.join(logs, f"{model}-cuda*.jsonl")), key=lambda p: (len(p), p))
        for path in runs or [os.path.join(logs, f"{model}-cuda.jsonl")]:
            run = os.path.basename(path)[len(model) + 1:-len(".jsonl")]
            name = model if run == "cuda" else f"{model} {run[len('cuda-'):]} matmuls"
            ref = cpu
            if run.startswith("cuda-precision_"):
                # train.precision bf16: against the cpu's run at the same precision.
                name = f"{model} train.precision {run[len('cuda-precision_'):]} (against the cpu's)"
                ref = records(os.path.join(logs, f"{model}-cpu-{run[len('cuda-'):]}.jsonl"), "loss")
            cuda = records(path, "loss")
            cpu_ref = ref
            steps = sorted(set(cpu_ref) & set(cuda))
            if not steps:
                print(f"{name}: no losses to compare ({len(cpu_ref)} on cpu, {len(cuda)} on cuda)")
                continue
            worst = max(abs(cuda[s] - cpu_ref[s]) / max(abs(cpu_ref[s]), 1e-12) for s in steps)
            print(f"{name}: {len(steps)} steps, largest relative difference {worst:.3g}; "
                  f"last loss cpu {cpu_ref[steps[-1]]:.6f} cuda {cuda[steps[-1]]:.6f}")
    print("\n== gpt offloaded to 2 servers, sync.wire and train.precision bf16: cuda against cpu")
    cpu = records(os.path.join(logs, "gpt_offload-cpu-0.jsonl"), "loss")
    cuda = records(os.path.join(logs, "gpt_offload-cuda-0.jsonl"), "loss")
    steps = sorted(set(cpu) & set(cuda))
    if steps:
        worst = max(abs(cuda[s] - cpu[s]) / max(abs(cpu[s]), 1e-12) for s in steps)
        print(f"gpt_offload: {len(steps)} steps, largest relative difference {worst:.3g}; "
              f"last loss cpu {cpu[steps[-1]]:.6f} cuda {cuda[steps[-1]]:.6f}")
    else:
        print(f"gpt_offload: no losses to compare ({len(cpu)} on cpu, {len(cuda)} on cuda)")
    print("\n== ctr through 2 servers, 2 trainers (evaluation AUC of trainer 0)")
    for run in ("ps-cpu", "ps-cuda", "hybrid-cuda"):
        auc = records(os.path.join(logs, f"ctr-{run}-0.jsonl"), "auc")
        oracle = records(os.path.join(logs, f"ctr-{run}-0.jsonl"), "oracle_auc")
        last = max(auc) if auc else None
        print(f"{run}: " + (f"auc {auc[last]:.4f} (oracle {oracle.get(last, float('nan')):.4f}) at step {last}"
                           if last is not None else "no AUC recorded"))
    reports = sorted(glob.glob(os.path.join(logs, "bench-*.json")))
    for expected in ("bench-ops", "bench-step"):
        if not any(os.path.basename(p).startswith(expected) for p in reports):
            print(f"\n== {expected}: no report")
    for path in reports:
        name = os.path.basename(path)[:-len(".json")]
        with open(path) as f:
            report = json.load(f)
        for table in report.get("tables", []):
            print(f"\n== {name}: {table['title']}")
            for row in table["rows"]:
                print("  " + ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}" for k, v in row.items()))


if __name__ == "__main__":
    main()
