#!/usr/bin/env python3
"""generate.py: Kubernetes manifests for a strata cluster of S servers and T trainers.

    deploy/k8s/generate.py --servers 2 --trainers 4 --job examples/ctr.yaml > strata.yaml
    kubectl apply -f strata.yaml

Writes, as one multi-document YAML: a ConfigMap holding the job file; the scheduler as a
Service + a Job; the servers as a headless Service + one Job and one PersistentVolumeClaim per
server (server.store.path: the RocksDB tier and WAL); the trainers as an Indexed Job. The
scheduler's and servers' Jobs restart their pod in place after a crash (restartPolicy
OnFailure) and complete when the job ends, so nothing starts again after training
(docs/deploy.md says why not a Deployment and a StatefulSet). Every process learns its place
from strata's environment convention (docs/deploy.md): STRATA_SCHEDULER, STRATA_SERVERS,
STRATA_TRAINERS, STRATA_RANK (a server's number, a trainer's completion index) and
STRATA_ADVERTISE_HOST (the pod IP).
Every process serves /metrics, /healthz and /livez on the job's cluster.metrics_port (default
9100; --metrics-port sets it exactly, each pod has its own address): readiness probes
/healthz (a server answers 503 while it loads its tables or registers), liveness probes /livez
(which a long load does not fail), and a trainer, whose endpoint starts once it has joined and
built its model, has a startup probe giving it that long.
Only the standard library is needed (the YAML is written by hand, keys in a fixed order).
"""
import argparse
import json
import re
import sys

SCHEDULER_PORT = 7000
SERVER_PORT = 7100
TRAINER_PORT = 7200
DEFAULT_METRICS_PORT = 9100


def labels(role):
    return {"app.kubernetes.io/name": "strata", "app.kubernetes.io/component": role}


def env(pairs):
    out = []
    for name, value in pairs:
        if isinstance(value, dict):
            out.append({"name": name, "valueFrom": value})
        else:
            out.append({"name": name, "value": str(value)})
    return out


def field(path):
    return {"fieldRef": {"fieldPath": path}}


def http_probes(startup):
    """Readiness on /healthz, liveness on /livez, both on the container's "metrics" port."""
    def get(path):
        return {"httpGet": {"path": path, "port": "metrics"}}
    probes = {
        "readinessProbe": dict(get("/healthz"), periodSeconds=5),
        "livenessProbe": dict(get("/livez"), periodSeconds=10, timeoutSeconds=5, failureThreshold=6),
    }
    if startup:
        # Until its endpoint is up (joined the cluster, model built): up to 10 minutes.
        probes["startupProbe"] = dict(get("/livez"), periodSeconds=10, failureThreshold=60)
    return probes


def container(name, image, command, env_pairs, port, metrics_port, resources, mounts, startup=False):
    c = {
        "name": name,
        "image": image,
        "command": ["sh", "-c", command + f" --metrics-port {metrics_port}"],
        "env": env(env_pairs),
        "ports": [{"name": "strata", "containerPort": port},
                  {"name": "metrics", "containerPort": metrics_port}],
        "resources": resources,
        "volumeMounts": mounts,
    }
    c.update(http_probes(startup))
    return c


def run_to_completion(name, pod_labels, backoff_limit, pod_spec):
    """A Job of one pod that restarts in place on failure and is done when it exits 0."""
    return {
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "labels": pod_labels},
        "spec": {
            "completions": 1,
            "parallelism": 1,
            "backoffLimit": backoff_limit,
            "template": {
                "metadata": {"labels": pod_labels},
                "spec": dict(restartPolicy="OnFailure", **pod_spec),
            },
        },
    }


def job_metrics_port(job_text):
    """cluster.metrics_port of the job file, or None (PyYAML when present, else a plain scan)."""
    try:
        import yaml
        cluster = (yaml.safe_load(job_text) or {}).get("cluster") or {}
        port = cluster.get("metrics_port")
        return int(port) if port else None
    except ImportError:
        m = re.search(r"^\s*metrics_port:\s*([0-9]+)", job_text, re.M)
        return int(m.group(1)) if m and int(m.group(1)) else None


def generate(a, job_text):
    common_env = [
        ("STRATA_SCHEDULER", f"strata-scheduler:{SCHEDULER_PORT}"),
        ("STRATA_SERVERS", a.servers),
        ("STRATA_TRAINERS", a.trainers),
        ("STRATA_BIND_HOST", "0.0.0.0"),
        ("STRATA_ADVERTISE_HOST", field("status.podIP")),
    ]
    job_mount = [{"name": "job", "mountPath": "/jobs", "readOnly": True}]
    job_volume = [{"name": "job", "configMap": {"name": "strata-job"}}]
    cpu = {"requests": {"cpu": a.cpu, "memory": a.memory}, "limits": {"memory": a.memory}}
    trainer_res = json.loads(json.dumps(cpu))
    if a.gpus > 0:
        trainer_res["limits"]["nvidia.com/gpu"] = a.gpus
    job_file = "/jobs/job.yaml"
    docs = []
    docs.append({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "strata-job", "labels": labels("job")},
        "data": {"job.yaml": job_text},
    })
    docs.append({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "strata-scheduler", "labels": labels("scheduler")},
        "spec": {"selector": labels("scheduler"),
                 "ports": [{"name": "strata", "port": SCHEDULER_PORT, "targetPort": SCHEDULER_PORT}]},
    })
    # The scheduler and each server run to completion: a Job whose pod restarts in place on a
    # crash (restartPolicy OnFailure, up to --backoff-limit times) and stays Completed once the
    # job has ended (exit 0), where a Deployment or StatefulSet would start them again.
    docs.append(run_to_completion(
        "strata-scheduler", labels("scheduler"), a.backoff_limit,
        {
            "containers": [container(
                "scheduler", a.image,
                f"exec strata-scheduler -c {job_file} --bind tcp://0.0.0.0:{SCHEDULER_PORT}",
                common_env[1:3], SCHEDULER_PORT, a.metrics_port,
                {"requests": {"cpu": "250m", "memory": "256Mi"}}, job_mount)],
            "volumes": job_volume,
        }))
    if a.servers > 0:
        docs.append({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "strata-server", "labels": labels("server")},
            "spec": {"clusterIP": "None", "selector": labels("server"),
                     "ports": [{"name": "strata", "port": SERVER_PORT}]},
        })
    for r in range(a.servers):
        # Server r: its own claim (the RocksDB tier and WAL), so a restarted container, or a
        # pod the Job makes again elsewhere, reloads that shard; the claim outlives the Job.
        claim = f"store-strata-server-{r}"
        docs.append({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": claim, "labels": labels("server")},
            "spec": {"accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": a.storage}}},
        })
        docs.append(run_to_completion(
            f"strata-server-{r}", labels("server"), a.backoff_limit,
            {
                "containers": [container(
                    "server", a.image,
                    f"exec strata-server -c {job_file} --bind tcp://0.0.0.0:{SERVER_PORT} "
                    "--set server.store.path=/var/lib/strata",
                    common_env + [("STRATA_RANK", r)], SERVER_PORT, a.metrics_port, cpu,
                    job_mount + [{"name": "store", "mountPath": "/var/lib/strata"}])],
                "volumes": job_volume + [{"name": "store", "persistentVolumeClaim": {"claimName": claim}}],
            }))
    trainer_env = common_env + [
        ("STRATA_RANK", field("metadata.annotations['batch.kubernetes.io/job-completion-index']"))]
    docs.append({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "strata-trainer", "labels": labels("trainer")},
        "spec": {
            "completionMode": "Indexed",
            "completions": a.trainers,
            "parallelism": a.trainers,
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": labels("trainer")},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [container(
                        "trainer", a.image,
                        f"exec strata-trainer -c {job_file} --bind tcp://0.0.0.0:{TRAINER_PORT}",
                        trainer_env, TRAINER_PORT, a.metrics_port, trainer_res, job_mount,
                        startup=True)],
                    "volumes": job_volume,
                },
            },
        },
    })
    return docs


# --- a small YAML writer: block style, strings quoted when YAML would misread them ---
def scalar(v):
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    s = str(v)
    return json.dumps(s)  # a JSON string is a valid YAML double-quoted scalar


def dump(v, indent=0):
    pad = " " * indent
    lines = []
    if isinstance(v, dict):
        for k, x in v.items():
            if isinstance(x, str) and "\n" in x:
                lines.append(f"{pad}{k}: |")
                lines.extend(pad + "  " + line if line else "" for line in x.rstrip("\n").split("\n"))
            elif isinstance(x, (dict, list)) and x:
                lines.append(f"{pad}{k}:")
                lines.extend(dump(x, indent + 2))
            elif isinstance(x, (dict, list)):
                lines.append(f"{pad}{k}: {'{}' if isinstance(x, dict) else '[]'}")
            else:
                lines.append(f"{pad}{k}: {scalar(x)}")
    else:
        for x in v:
            if isinstance(x, (dict, list)) and x:
                sub = dump(x, indent + 2)
                lines.append(f"{pad}- {sub[0].lstrip()}")
                lines.extend(sub[1:])
            else:
                lines.append(f"{pad}- {scalar(x)}")
    return lines


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--servers", type=int, default=2)
    p.add_argument("--trainers", type=int, default=2)
    p.add_argument("--job", default="examples/ctr.yaml", help="job file put in the ConfigMap")
    p.add_argument("--image", default="strata:latest")
    p.add_argument("--gpus", type=int, default=0, help="nvidia.com/gpu per trainer (0: none)")
    p.add_argument("--cpu", default="2", help="CPU request of a server or trainer")
    p.add_argument("--memory", default="4Gi", help="memory request and limit of a server or trainer")
    p.add_argument("--storage", default="20Gi", help="each server's volume (RocksDB tier, WAL)")
    p.add_argument("--backoff-limit", type=int, default=6,
                   help="restarts of the scheduler or a server after a crash before its Job fails")
    p.add_argument("--metrics-port", type=int, default=None,
                   help="every process's /metrics, /healthz and /livez port (default: the job's "
                        f"cluster.metrics_port, else {DEFAULT_METRICS_PORT})")
    a = p.parse_args()
    if a.servers < 0 or a.trainers < 1 or a.gpus < 0 or a.backoff_limit < 0:
        p.error("need --servers >= 0, --trainers >= 1, --gpus >= 0, --backoff-limit >= 0")
    try:
        with open(a.job) as f:
            job_text = f.read()
    except OSError as e:
        p.error(f"cannot read the job file: {e}")
    if a.metrics_port is None:
        a.metrics_port = job_metrics_port(job_text) or DEFAULT_METRICS_PORT
    if not 0 < a.metrics_port < 65536 or a.metrics_port in (SCHEDULER_PORT, SERVER_PORT, TRAINER_PORT):
        p.error(f"--metrics-port {a.metrics_port}: need 1..65535, not one of the strata ports "
                f"{SCHEDULER_PORT}, {SERVER_PORT}, {TRAINER_PORT}")
    out = [f"# strata on Kubernetes: 1 scheduler, {a.servers} servers, {a.trainers} trainers.",
           f"# Generated by deploy/k8s/generate.py --servers {a.servers} --trainers {a.trainers} "
           f"--job {a.job} --image {a.image} --gpus {a.gpus}; do not edit, regenerate."]
    for d in generate(a, job_text):
        out.append("---")
        out.extend(dump(d))
    sys.stdout.write("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
