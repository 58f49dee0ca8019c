"""gpu_check_summary_test.py: scripts/gpu_check_summary.py on a logs folder written here the way
scripts/gpu-check.sh run writes it: gtest JSON reports with a pass, a skip and a failure, losses
of both devices (and cuda with bf16 matmuls, and train.precision bf16 on both), ctr's AUC on one device only, and a bench report.

    python3 gpu_check_summary_test.py SCRIPT
"""
import json
import os
import subprocess
import sys
import tempfile


def main():
    script = sys.argv[1]
    with tempfile.TemporaryDirectory() as logs:
        suites = {"testsuites": [{"name": "CudaOps", "testsuite": [
            {"name": "Matmul", "result": "COMPLETED"},
            {"name": "Nccl", "result": "SKIPPED"},
            {"name": "LayerNorm", "result": "COMPLETED", "failures": [{"failure": "off by 1e-3"}]}]}]}
        with open(os.path.join(logs, "trainer_gpu_tests.json"), "w") as f:
            json.dump(suites, f)
        for dev, losses in (("cpu", [2.0, 1.5]), ("cuda", [2.0, 1.5 * (1 + 3e-6)]),
                            ("cuda-bf16", [2.0 * (1 + 2e-3), 1.5]), ("cpu-precision_bf16", [2.5, 1.8]),
                            ("cuda-precision_bf16", [2.5 * (1 + 4e-3), 1.8])):
            with open(os.path.join(logs, f"gpt-{dev}.jsonl"), "w") as f:
                f.write(json.dumps({"memory": {}, "step": 1}) + "\n")
                for step, loss in enumerate(losses, 1):
                    f.write(json.dumps({"step": step, "loss": loss}) + "\n")
        with open(os.path.join(logs, "ctr-ps-cpu-0.jsonl"), "w") as f:
            f.write(json.dumps({"step": 1000, "auc": 0.8, "oracle_auc": 0.84}) + "\n")
        with open(os.path.join(logs, "bench-step.json"), "w") as f:
            json.dump({"tables": [{"title": "steps", "rows": [{"run": "strata", "step_ms": 12.5}]}]}, f)
        text = subprocess.run([sys.executable, script, logs], check=True, capture_output=True, text=True).stdout
    expected = [
        "trainer_gpu_tests.json: 1 passed, 1 skipped, 1 failed",
        "FAILED CudaOps.LayerNorm",
        "mlp: no losses to compare (0 on cpu, 0 on cuda)",
        "gpt: 2 steps, largest relative difference 3e-06",
        "gpt bf16 matmuls: 2 steps, largest relative difference 0.002",
        "gpt train.precision bf16 (against the cpu's): 2 steps, largest relative difference 0.004",
        "gpt_offload: no losses to compare (0 on cpu, 0 on cuda)",
        "ps-cpu: auc 0.8000 (oracle 0.8400) at step 1000",
        "ps-cuda: no AUC recorded",
        "hybrid-cuda: no AUC recorded",
        "bench-ops: no report",
        "run strata, step_ms 12.5",
    ]
    missing = [e for e in expected if e not in text]
    if missing:
        sys.exit("missing from the summary: " + repr(missing) + "\n" + text)
    print("gpu_check_summary: every expected line present")


if __name__ == "__main__":
    main()
