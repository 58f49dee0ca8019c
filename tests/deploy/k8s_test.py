#!/usr/bin/env python3
"""k8s_test.py: deploy/k8s/generate.py's manifests, checked without a cluster.

kubectl apply --dry-run=client still asks an API server for discovery, so there is none here;
instead every document is parsed and checked structurally (kinds and API versions, selectors
against pod labels, Services against ports, probes against the ports the processes bind, the
PVC mounted where server.store.path points, GPU limits), the counts and ranks are checked for
3 servers and 5 trainers, the environment a pod gets is fed to the real binaries
(--print-config, strata-task --dry-run) to check that it yields the intended cluster, and the
committed deploy/k8s/strata.yaml must equal the generator's default output.
    k8s_test.py SOURCE_DIR BIN_DIR
Exits 77 (skip) without PyYAML.
"""
import os
import re
import subprocess
import sys
import tempfile

src, bindir = sys.argv[1], sys.argv[2]
try:
    import yaml
except ImportError:
    print("SKIP: python3 has no yaml module (PyYAML) to parse the manifests")
    sys.exit(77)

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def generate(*args):
    out = subprocess.run([sys.executable, f"{src}/deploy/k8s/generate.py", "--job",
                          "examples/ctr.yaml", *args], capture_output=True, text=True,
                         cwd=src)
    if out.returncode != 0:
        print(out.stderr)
        sys.exit(1)
    return out.stdout


API = {"ConfigMap": "v1", "Service": "v1", "Deployment": "apps/v1", "StatefulSet": "apps/v1",
       "Job": "batch/v1"}


def env_of(c):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}


def pod_spec(d):
    return d["spec"]["template"]["spec"]


docs = list(yaml.safe_load_all(generate("--servers", "3", "--trainers", "5", "--gpus", "1")))
kinds = [d["kind"] for d in docs]
check(sorted(kinds) == sorted(["ConfigMap", "Service", "Deployment", "Service", "StatefulSet", "Job"]),
      f"kinds {kinds}")
by = {}
for d in docs:
    check(d.get("apiVersion") == API.get(d["kind"]), f"{d['kind']} apiVersion {d.get('apiVersion')}")
    check(re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", d["metadata"]["name"]) is not None,
          f"name {d['metadata']['name']} is a DNS label")
    by[(d["kind"], d["metadata"]["name"])] = d

workloads = [d for d in docs if d["kind"] in ("Deployment", "StatefulSet", "Job")]
for w in workloads:
    name = w["metadata"]["name"]
    tl = w["spec"]["template"]["metadata"]["labels"]
    sel = w["spec"].get("selector", {}).get("matchLabels", {})
    check(all(tl.get(k) == v for k, v in sel.items()), f"{name}: selector matches its pods")
    spec = pod_spec(w)
    vols = {v["name"] for v in spec.get("volumes", [])}
    vols |= {t["metadata"]["name"] for t in w["spec"].get("volumeClaimTemplates", [])}
    for c in spec["containers"]:
        check(c["image"] and c["command"][:2] == ["sh", "-c"], f"{name}: image and command")
        ports = {p["name"]: p["containerPort"] for p in c["ports"]}
        port = ports["strata"]
        cmd = c["command"][2]
        check(f"--bind tcp://0.0.0.0:{port}" in cmd, f"{name}: binds the port it exposes ({port})")
        check(f"--metrics-port {ports.get('metrics')}" in cmd, f"{name}: serves /healthz on its metrics port")
        for probe, path in (("readinessProbe", "/healthz"), ("livenessProbe", "/livez")):
            get = c[probe].get("httpGet", {})
            check(get.get("port") == "metrics" and get.get("path") == path,
                  f"{name}: {probe} is GET {path} on the metrics port: {c[probe]}")
        for m in c["volumeMounts"]:
            check(m["name"] in vols, f"{name}: volume {m['name']} exists")
        check("requests" in c["resources"], f"{name}: resource requests")

# Services select pods that exist and serve their port.
for (kind, name), svc in by.items():
    if kind != "Service":
        continue
    sel = svc["spec"]["selector"]
    targets = [w for w in workloads
               if all(w["spec"]["template"]["metadata"]["labels"].get(k) == v for k, v in sel.items())]
    check(len(targets) == 1, f"Service {name} selects one workload")
    if targets:
        ports = {c["ports"][0]["containerPort"] for c in pod_spec(targets[0])["containers"]}
        check(all(p.get("targetPort", p["port"]) in ports for p in svc["spec"]["ports"]),
              f"Service {name} targets a container port")

sched = by[("Deployment", "strata-scheduler")]
servers = by[("StatefulSet", "strata-server")]
trainers = by[("Job", "strata-trainer")]
check(sched["spec"]["replicas"] == 1, "one scheduler")
check(servers["spec"]["replicas"] == 3, "3 servers")
check(servers["spec"]["serviceName"] == "strata-server" and ("Service", "strata-server") in by,
      "servers' headless Service")
check(by[("Service", "strata-server")]["spec"]["clusterIP"] == "None", "servers' Service is headless")
check(trainers["spec"]["completionMode"] == "Indexed", "trainers are an Indexed Job")
check(trainers["spec"]["completions"] == 5 and trainers["spec"]["parallelism"] == 5, "5 trainers")
check(pod_spec(trainers)["restartPolicy"] == "Never", "trainers do not restart in place")

sched_port = by[("Service", "strata-scheduler")]["spec"]["ports"][0]["port"]
for w, role in ((servers, "server"), (trainers, "trainer")):
    c = pod_spec(w)["containers"][0]
    e = env_of(c)
    check(e.get("STRATA_SCHEDULER") == f"strata-scheduler:{sched_port}", f"{role}: STRATA_SCHEDULER")
    check(e.get("STRATA_SERVERS") == "3" and e.get("STRATA_TRAINERS") == "5", f"{role}: counts")
    check(e.get("STRATA_ADVERTISE_HOST") == {"fieldRef": {"fieldPath": "status.podIP"}},
          f"{role}: advertises the pod IP")
tc = pod_spec(trainers)["containers"][0]
check(env_of(tc).get("STRATA_RANK") == {"fieldRef": {"fieldPath":
      "metadata.annotations['batch.kubernetes.io/job-completion-index']"}},
      "trainer rank = completion index")
check(tc["resources"]["limits"].get("nvidia.com/gpu") == 1, "one GPU per trainer")
sc = pod_spec(servers)["containers"][0]
check("nvidia.com/gpu" not in sc["resources"].get("limits", {}), "servers take no GPU")
check("--set server.store.path=/var/lib/strata" in sc["command"][2], "server store on the volume")
check({"name": "store", "mountPath": "/var/lib/strata"} in sc["volumeMounts"], "PVC mounted")
pvc = servers["spec"]["volumeClaimTemplates"][0]
check(pvc["spec"]["resources"]["requests"]["storage"] and
      pvc["spec"]["accessModes"] == ["ReadWriteOnce"], "one ReadWriteOnce PVC per server")
job_text = by[("ConfigMap", "strata-job")]["data"]["job.yaml"]
check(yaml.safe_load(job_text) == yaml.safe_load(open(f"{src}/examples/ctr.yaml")),
      "the ConfigMap holds the job file")

# The pods' environment, fed to the real binaries.
with tempfile.TemporaryDirectory() as tmp:
    job = os.path.join(tmp, "job.yaml")
    with open(job, "w") as f:
        f.write(job_text)
    pod_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "STRATA_SCHEDULER": "strata-scheduler:7000",
               "STRATA_SERVERS": "3", "STRATA_TRAINERS": "5", "STRATA_BIND_HOST": "0.0.0.0",
               "STRATA_ADVERTISE_HOST": "10.1.2.3", "STRATA_RANK": "4"}
    out = subprocess.run([f"{bindir}/strata-trainer", "-c", job, "--print-config"], env=pod_env,
                         capture_output=True, text=True)
    cfg = yaml.safe_load(out.stdout) if out.returncode == 0 else {}
    check(out.returncode == 0, f"strata-trainer --print-config with the pod's env: {out.stderr}")
    if cfg:
        c = cfg["cluster"]
        check((c["scheduler"], c["servers"], c["trainers"]) == ("tcp://strata-scheduler:7000", 3, 5),
              f"the pod's env gives the cluster: {c}")
    # The server's shell line takes its rank from the StatefulSet ordinal in its hostname.
    fake = os.path.join(tmp, "strata-server")
    with open(fake, "w") as f:
        f.write('#!/bin/sh\necho "rank=$STRATA_RANK args=$*"\n')
    os.chmod(fake, 0o755)
    env = dict(pod_env, PATH=tmp + ":" + pod_env["PATH"], HOSTNAME="strata-server-2")
    out = subprocess.run(sc["command"], env=env, capture_output=True, text=True)
    check(out.stdout.startswith("rank=2 "), f"strata-server-2 is server 2: {out.stdout!r}")

# No servers: no StatefulSet or its Service; the committed manifests are the default output.
kinds0 = [d["kind"] for d in yaml.safe_load_all(generate("--servers", "0", "--trainers", "2"))]
check("StatefulSet" not in kinds0 and kinds0.count("Service") == 1, f"0 servers: {kinds0}")
bad = subprocess.run([sys.executable, f"{src}/deploy/k8s/generate.py", "--trainers", "0"],
                     capture_output=True, text=True, cwd=src)
check(bad.returncode != 0 and "--trainers" in bad.stderr, "--trainers 0 is refused naming it")
with open(f"{src}/deploy/k8s/strata.yaml") as f:
    committed = f.read()
check(committed == generate(), "deploy/k8s/strata.yaml is generate.py's default output (regenerate it)")

kubectl = subprocess.run("command -v kubectl", shell=True, capture_output=True).returncode == 0
print("kubectl:", "present, but --dry-run=client needs an API server for discovery; not used"
      if kubectl else "absent", "- structural checks only")
if failures:
    print(f"{len(failures)} checks failed")
    sys.exit(1)
print("PASS: manifests for 3 servers and 5 trainers, the default set, and the pods' environment")
