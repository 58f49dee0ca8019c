#!/usr/bin/env python3
"""compose.py: docker-compose files for a strata cluster, on one host or split across hosts.

One host (what docker/docker-compose.yml is, for 2 servers and 2 trainers):
    docker/compose.py --servers 3 --trainers 4 > docker/strata-3x4.yml
    docker-compose -f docker/strata-3x4.yml up
Two hosts (host networking; A at 10.0.0.1 runs the scheduler and the servers, B the trainers):
    A: docker/compose.py -s 2 -t 4 --roles scheduler,server --network host --advertise 10.0.0.1 > a.yml
    B: docker/compose.py -s 2 -t 4 --roles trainer --network host --advertise 10.0.0.2 \\
           --scheduler 10.0.0.1:7000 > b.yml
Every service gets its place from strata's environment convention (docs/deploy.md): the counts
(STRATA_SERVERS, STRATA_TRAINERS), its rank (STRATA_RANK), the scheduler (STRATA_SCHEDULER) and
the address peers dial (STRATA_ADVERTISE_HOST: its service name on the compose network, the
host's address with host networking). Each server keeps its shard on its own volume.
"""
import argparse
import importlib.util
import os
import sys

SCHEDULER_PORT, SERVER_PORT, TRAINER_PORT = 7000, 7100, 7200

spec = importlib.util.spec_from_file_location(
    "k8s_generate", os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "deploy", "k8s", "generate.py"))
k8s = importlib.util.module_from_spec(spec)
spec.loader.exec_module(k8s)  # for its YAML writer


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("-s", "--servers", type=int, default=2)
    p.add_argument("-t", "--trainers", type=int, default=2)
    p.add_argument("--roles", default="scheduler,server,trainer",
                   help="which of scheduler,server,trainer this file runs (one host's share)")
    p.add_argument("--network", choices=["bridge", "host"], default="bridge",
                   help="bridge: one host, services find each other by name; host: across hosts")
    p.add_argument("--advertise", default="", help="this host's address peers dial (--network host)")
    p.add_argument("--scheduler", default="", help="host:port of a scheduler run elsewhere")
    p.add_argument("--gpus", type=int, default=1, help="GPUs reserved per trainer (0: none)")
    a = p.parse_args()
    roles = set(a.roles.split(","))
    if not roles <= {"scheduler", "server", "trainer"} or not roles:
        p.error(f"--roles: expected a list of scheduler, server, trainer, got {a.roles!r}")
    if a.servers < 0 or a.trainers < 1:
        p.error("need --servers >= 0 and --trainers >= 1")
    host = a.network == "host"
    if host and not a.advertise:
        p.error("--network host needs --advertise (this host's address that the other hosts reach)")
    if "scheduler" not in roles and not a.scheduler:
        p.error("--roles without scheduler needs --scheduler host:port (where it runs)")
    scheduler = a.scheduler or (f"{a.advertise}:{SCHEDULER_PORT}" if host else f"scheduler:{SCHEDULER_PORT}")

    base = {
        "image": "strata:latest",
        "volumes": ["../examples:/jobs:ro"],
    }
    if host:
        base["network_mode"] = "host"
    common_env = {
        "STRATA_JOB": "${STRATA_JOB:-/jobs/ctr.yaml}",
        "STRATA_SERVERS": str(a.servers),
        "STRATA_TRAINERS": str(a.trainers),
    }
    services = {}
    built = False

    def healthcheck(port):
        # Up and listening on its messaging port (bash's /dev/tcp: the image needs no curl).
        return {"test": ["CMD", "bash", "-c", f"exec 3<>/dev/tcp/127.0.0.1/{port}"],
                "interval": "10s", "timeout": "3s", "retries": 3, "start_period": "60s"}

    def service(env, command, extra=None):
        nonlocal built
        s = dict(base)
        if not built:  # one service builds the image, the others reuse it
            s = {"build": {"context": "..", "dockerfile": "docker/Dockerfile"}, **s}
            built = True
        s["environment"] = {**common_env, **env}
        s["command"] = ["sh", "-c", command]
        if extra:
            s.update(extra)
        return s

    if "scheduler" in roles:
        services["scheduler"] = service(
            {}, f"exec strata-scheduler -c $$STRATA_JOB --bind tcp://0.0.0.0:{SCHEDULER_PORT}",
            # Restarted after a crash, it rebuilds the job's membership from the nodes
            # (docs/deploy.md); a clean end exits 0 and stays down.
            {"healthcheck": healthcheck(SCHEDULER_PORT), "restart": "on-failure"})
    member_extra = {} if "scheduler" not in roles or host else {"depends_on": ["scheduler"]}
    volumes = {}
    for role, count, port in (("server", a.servers, SERVER_PORT), ("trainer", a.trainers, TRAINER_PORT)):
        if role not in roles:
            continue
        for r in range(count):
            name = f"{role}{r}"
            bind_port = port + r if host else port  # host networking: one port each
            env = {
                "STRATA_RANK": str(r),
                "STRATA_SCHEDULER": scheduler,
                "STRATA_BIND_HOST": "0.0.0.0",
                "STRATA_ADVERTISE_HOST": a.advertise if host else name,
            }
            command = f"exec strata-{role} -c $$STRATA_JOB --bind tcp://0.0.0.0:{bind_port}"
            extra = dict(member_extra)
            extra["healthcheck"] = healthcheck(bind_port)
            if role == "server":
                command += " --set server.store.path=/var/lib/strata"
                volumes[f"strata-nvme-{r}"] = {}
                extra["volumes"] = base["volumes"] + [f"strata-nvme-{r}:/var/lib/strata"]
                # Restarted after a crash, it reloads its shard from the volume and rejoins.
                extra["restart"] = "on-failure"
            elif a.gpus > 0:
                extra["deploy"] = {"resources": {"reservations": {"devices": [
                    {"driver": "nvidia", "count": a.gpus, "capabilities": ["gpu"]}]}}}
            services[name] = service(env, command, extra)

    doc = {"version": "3.8", "services": services}
    if volumes:
        doc["volumes"] = volumes
    header = [
        f"# strata under docker-compose: {a.servers} servers, {a.trainers} trainers; this file runs "
        f"{', '.join(sorted(roles))} ({a.network} network).",
        "# Generated by docker/compose.py " + (" ".join(sys.argv[1:]) or "(the defaults)") +
        "; regenerate, do not edit.",
        "# STRATA_JOB picks the job file (examples/ is mounted at /jobs).",
    ]
    sys.stdout.write("\n".join(header + k8s.dump(doc)) + "\n")


if __name__ == "__main__":
    main()
