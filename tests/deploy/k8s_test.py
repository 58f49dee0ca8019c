#!/usr/bin/env python3
"""k8s_test.py: deploy/k8s/generate.py's manifests, checked without a cluster.

Every document is parsed and checked structurally (kinds and API versions, selectors against
pod labels, Services against ports, HTTP probes on the port the processes serve /healthz on, each
server's PVC mounted where server.store.path points, GPU limits, run-to-completion restart
policies), the counts and ranks are checked for 3 servers and 5 trainers, the environment a pod
gets is fed to the real binaries (--print-config) to check that it yields the intended cluster,
and the committed deploy/k8s/strata.yaml must equal the generator's default output.
k8s_schema_test.py validates the same manifests against the Kubernetes OpenAPI schemas.
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


API = {"ConfigMap": "v1", "Service": "v1", "PersistentVolumeClaim": "v1", "Job": "batch/v1"}


def env_of(c):
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}


def pod_spec(d):
    return d["spec"]["template"]["spec"]


docs = list(yaml.safe_load_all(generate("--servers", "3", "--trainers", "5", "--gpus", "1")))
kinds = [d["kind"] for d in docs]
# The scheduler, 3 servers and the trainers as Jobs; no Deployment or StatefulSet, whose pods
# would start again after training ends.
check(sorted(kinds) == sorted(["ConfigMap", "Service", "Service"] + ["PersistentVolumeClaim"] * 3 + ["Job"] * 5),
      f"kinds {kinds}")
by = {}
for d in docs:
    check(d.get("apiVersion") == API.get(d["kind"]), f"{d['kind']} apiVersion {d.get('apiVersion')}")
    check(re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", d["metadata"]["name"]) is not None,
          f"name {d['metadata']['name']} is a DNS label")
    by[(d["kind"], d["metadata"]["name"])] = d

workloads = [d for d in docs if d["kind"] in ("Deployment", "StatefulSet", "Job")]
claims = {d["metadata"]["name"] for d in docs if d["kind"] == "PersistentVolumeClaim"}
for w in workloads:
    name = w["metadata"]["name"]
    tl = w["spec"]["template"]["metadata"]["labels"]
    sel = w["spec"].get("selector", {}).get("matchLabels", {})
    check(all(tl.get(k) == v for k, v in sel.items()), f"{name}: selector matches its pods")
    spec = pod_spec(w)
    vols = {v["name"] for v in spec.get("volumes", [])}
    for v in spec.get("volumes", []):
        if "persistentVolumeClaim" in v:
            check(v["persistentVolumeClaim"]["claimName"] in claims, f"{name}: its claim exists")
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
    check(len(targets) == (3 if name == "strata-server" else 1), f"Service {name} selects its workloads")
    if targets:
        ports = {c["ports"][0]["containerPort"] for c in pod_spec(targets[0])["containers"]}
        check(all(p.get("targetPort", p["port"]) in ports for p in svc["spec"]["ports"]),
              f"Service {name} targets a container port")

sched = by[("Job", "strata-scheduler")]
servers = [by[("Job", f"strata-server-{r}")] for r in range(3)]
trainers = by[("Job", "strata-trainer")]
for w in [sched] + servers:
    n = w["metadata"]["name"]
    check(w["spec"]["completions"] == 1 and w["spec"]["parallelism"] == 1, f"{n}: one pod")
    check(pod_spec(w)["restartPolicy"] == "OnFailure", f"{n}: restarts in place after a crash only")
    check(w["spec"]["backoffLimit"] > 0, f"{n}: may restart")
check(("Service", "strata-server") in by, "servers' headless Service")
check(by[("Service", "strata-server")]["spec"]["clusterIP"] == "None", "servers' Service is headless")
check(trainers["spec"]["completionMode"] == "Indexed", "trainers are an Indexed Job")
check(trainers["spec"]["completions"] == 5 and trainers["spec"]["parallelism"] == 5, "5 trainers")
check(pod_spec(trainers)["restartPolicy"] == "Never", "trainers do not restart in place")

sched_port = by[("Service", "strata-scheduler")]["spec"]["ports"][0]["port"]
for w, role in ((servers[0], "server"), (trainers, "trainer")):
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
for r, w in enumerate(servers):
    sc = pod_spec(w)["containers"][0]
    check(env_of(sc).get("STRATA_RANK") == str(r), f"strata-server-{r} is server {r}")
    check("nvidia.com/gpu" not in sc["resources"].get("limits", {}), "servers take no GPU")
    check("--set server.store.path=/var/lib/strata" in sc["command"][2], "server store on the volume")
    check({"name": "store", "mountPath": "/var/lib/strata"} in sc["volumeMounts"], "PVC mounted")
    vol = [v for v in pod_spec(w)["volumes"] if v["name"] == "store"]
    check(vol and vol[0]["persistentVolumeClaim"]["claimName"] == f"store-strata-server-{r}",
          f"server {r} mounts its own claim")
    pvc = by[("PersistentVolumeClaim", f"store-strata-server-{r}")]
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
    # A server's shell line, run with its pod's environment, starts strata-server as its rank.
    fake = os.path.join(tmp, "strata-server")
    with open(fake, "w") as f:
        f.write('#!/bin/sh\necho "rank=$STRATA_RANK args=$*"\n')
    os.chmod(fake, 0o755)
    sc = pod_spec(servers[2])["containers"][0]
    env = dict(pod_env, PATH=tmp + ":" + pod_env["PATH"], STRATA_RANK=env_of(sc)["STRATA_RANK"])
    out = subprocess.run(sc["command"], env=env, capture_output=True, text=True)
    check(out.stdout.startswith("rank=2 ") and "--metrics-port" in out.stdout,
          f"strata-server-2 is server 2: {out.stdout!r}")

# No servers: no server Job, claim or Service; the committed manifests are the default output.
kinds0 = [d["kind"] for d in yaml.safe_load_all(generate("--servers", "0", "--trainers", "2"))]
check(kinds0.count("Job") == 2 and "PersistentVolumeClaim" not in kinds0 and kinds0.count("Service") == 1,
      f"0 servers: {kinds0}")
bad = subprocess.run([sys.executable, f"{src}/deploy/k8s/generate.py", "--trainers", "0"],
                     capture_output=True, text=True, cwd=src)
check(bad.returncode != 0 and "--trainers" in bad.stderr, "--trainers 0 is refused naming it")
with open(f"{src}/deploy/k8s/strata.yaml") as f:
    committed = f.read()
check(committed == generate(), "deploy/k8s/strata.yaml is generate.py's default output (regenerate it)")

if failures:
    print(f"{len(failures)} checks failed")
    sys.exit(1)
print("PASS: manifests for 3 servers and 5 trainers, the default set, and the pods' environment")
