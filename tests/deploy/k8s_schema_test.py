#!/usr/bin/env python3
"""k8s_schema_test.py: deploy/k8s/generate.py's manifests validated against the Kubernetes
OpenAPI schemas without a cluster: what `kubectl apply --dry-run=client` checks on the client.

kubectl's client-side dry run still asks an API server for discovery, so the schemas come from
the npm registry instead (test-only; nothing of strata's build needs node):
  - kubernetes-models (JSON schemas generated from the Kubernetes 1.27 OpenAPI spec, compiled to
    validators): every object's types, required fields, enums and formats, by apiVersion/kind;
  - typescript, over kubernetes-models' interfaces (generated from the same spec): unknown
    fields, which the JSON schemas allow (kubectl's validation and kubeconform --strict reject
    them: a misspelt `readinesProbe` would otherwise pass unnoticed).
Every generated set is checked (several server and trainer counts, with and without GPUs, and
the committed deploy/k8s/strata.yaml), then broken copies prove each check rejects what it must.
    k8s_schema_test.py SOURCE_DIR WORK_DIR
WORK_DIR keeps the npm packages between runs. Installs Debian's nodejs and npm when missing.
Exits 77 (skip) naming the reason without PyYAML, when node and npm cannot be installed, or
when the npm registry cannot be reached.
"""
import copy
import json
import os
import shutil
import subprocess
import sys

src, work = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
PACKAGES = {"kubernetes-models": "5.1.0", "typescript": "5.4.5"}


def skip(why):
    print("SKIP:", why)
    sys.exit(77)


try:
    import yaml
except ImportError:
    skip("python3 has no yaml module (PyYAML) to read the manifests")


def apt_install(*packages):
    """Debian's packages, as root or with passwordless sudo; the reason when it cannot."""
    sudo = [] if os.geteuid() == 0 else ["sudo", "-n"]
    if sudo and subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode != 0:
        return "not root and no passwordless sudo"
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    install = sudo + ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]
    for attempt in (install, sudo + ["apt-get", "update", "-q"], install):
        out = subprocess.run(attempt, env=env, capture_output=True, text=True)
        if out.returncode == 0 and attempt is install:
            return None
    return (out.stderr or out.stdout).strip()[-300:]


if shutil.which("node") is None or shutil.which("npm") is None:
    print("installing nodejs and npm (apt-get)")
    why = apt_install("nodejs", "npm")
    if why or shutil.which("node") is None or shutil.which("npm") is None:
        skip(f"no node or npm, and apt-get install nodejs npm failed: {why}")


def installed(name, version):
    try:
        with open(os.path.join(work, "node_modules", name, "package.json")) as f:
            return json.load(f).get("version") == version
    except OSError:
        return False


os.makedirs(work, exist_ok=True)
if not all(installed(n, v) for n, v in PACKAGES.items()):
    with open(os.path.join(work, "package.json"), "w") as f:
        json.dump({"private": True, "type": "module"}, f)
    try:
        out = subprocess.run(["npm", "install", "--no-audit", "--no-fund", "--loglevel=error",
                              *[f"{n}@{v}" for n, v in PACKAGES.items()]],
                             cwd=work, capture_output=True, text=True, timeout=300)
        failed = out.returncode != 0 and (out.stderr or out.stdout).strip()[-600:]
    except subprocess.TimeoutExpired:
        failed = "npm install ran past 300 s"
    if failed or not all(installed(n, v) for n, v in PACKAGES.items()):
        skip(f"cannot install {PACKAGES} from the npm registry: {failed}")
shutil.copy(os.path.join(src, "tests/deploy/k8s_schema_check.mjs"), work)
tsc = os.path.join(work, "node_modules/typescript/bin/tsc")

failures = []


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


def generate(*args):
    out = subprocess.run([sys.executable, "deploy/k8s/generate.py", "--job", "examples/ctr.yaml", *args],
                         cwd=src, capture_output=True, text=True)
    if out.returncode != 0:
        print(out.stderr)
        sys.exit(1)
    return list(yaml.safe_load_all(out.stdout))


def schema_check(name, objects):
    """kubernetes-models' validators: (ok, output)."""
    path = os.path.join(work, f"{name}.json")
    with open(path, "w") as f:
        json.dump(objects, f)
    out = subprocess.run(["node", "k8s_schema_check.mjs", path], cwd=work, capture_output=True, text=True)
    return out.returncode == 0, out.stdout + out.stderr


def module_of(o):
    group, _, version = o["apiVersion"].rpartition("/")
    return f"kubernetes-models/{group + '/' if group else ''}{version}/{o['kind']}"


def write_typed(name, objects):
    """A TypeScript module assigning each object to its kind's interface."""
    path = os.path.join(work, f"{name}.mts")
    lines, seen = [], set()
    for o in objects:
        if (o["kind"], module_of(o)) not in seen:
            seen.add((o["kind"], module_of(o)))
            lines.append(f'import type {{ I{o["kind"]} }} from "{module_of(o)}";')
    for i, o in enumerate(objects):
        lines.append(f"export const o{i}: I{o['kind']} = {json.dumps(o)};")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    return path


def type_check(paths):
    """tsc over the modules: {path: [errors]} (no entry: clean)."""
    out = subprocess.run(["node", tsc, "--noEmit", "--strict", "--skipLibCheck", "--target", "es2022",
                          "--module", "nodenext", "--moduleResolution", "nodenext", *paths],
                         cwd=work, capture_output=True, text=True)
    errors = {}
    for line in out.stdout.splitlines():
        for p in paths:
            if line.startswith(os.path.basename(p) + "(") or line.startswith(p + "("):
                errors.setdefault(p, []).append(line)
    if out.returncode != 0 and not errors:
        errors["?"] = [out.stdout + out.stderr]
    return errors


# --- every generated set passes ---
sets = {
    "s0-t1": ("--servers", "0", "--trainers", "1"),
    "s1-t1": ("--servers", "1", "--trainers", "1"),
    "s3-t5-gpu1": ("--servers", "3", "--trainers", "5", "--gpus", "1"),
    "s8-t16-gpu2": ("--servers", "8", "--trainers", "16", "--gpus", "2", "--storage", "500Gi",
                    "--cpu", "7500m", "--memory", "60Gi"),
}
manifests = {name: generate(*args) for name, args in sets.items()}
with open(os.path.join(src, "deploy/k8s/strata.yaml")) as f:
    manifests["committed"] = list(yaml.safe_load_all(f))
typed = []
for name, objects in manifests.items():
    ok, out = schema_check(name, objects)
    check(ok, f"{name}: the OpenAPI schemas reject it:\n{out}")
    kinds = sorted({o["kind"] for o in objects})
    if ok:
        print(f"{name}: {len(objects)} objects ({', '.join(kinds)}) pass the schemas")
    typed.append(write_typed(name, objects))
errors = type_check(typed)
check(not errors, f"unknown or mistyped fields: {errors}")
if not errors:
    print(f"{len(typed)} sets: no unknown field (typescript over the OpenAPI interfaces)")

# --- broken copies are rejected, each by the check that must see it ---
base = manifests["s3-t5-gpu1"]


def broken(change):
    objects = copy.deepcopy(base)
    change(objects)
    return objects


def workload(objects, kind):
    """The trainers' object of that kind."""
    return next(o for o in objects if o["kind"] == kind and o["metadata"]["name"] == "strata-trainer")


def first_container(objects, kind):
    return workload(objects, kind)["spec"]["template"]["spec"]["containers"][0]


def set_string_count(objects):
    workload(objects, "Job")["spec"]["completions"] = "5"


def drop_name(objects):
    del first_container(objects, "Job")["name"]


def bad_kind(objects):
    workload(objects, "Job")["kind"] = "Jobs"


def bad_port(objects):
    first_container(objects, "Job")["ports"][0]["containerPort"] = "7200"


schema_cases = {
    "a count as a string": (set_string_count, "completions must be integer"),
    "a container without its name": (drop_name, "must have required property name"),
    "a kind that does not exist": (bad_kind, "no schema for apiVersion batch/v1 kind Jobs"),
    "a port as a string": (bad_port, "containerPort must be integer"),
}
for what, (change, expect) in schema_cases.items():
    ok, out = schema_check("broken", broken(change))
    check(not ok and expect in out, f"{what}: not rejected by the schemas ({expect!r}):\n{out}")
    if not ok and "invalid" in out:
        print(f"rejected, {what}: {[l for l in out.splitlines() if l.startswith('invalid')][0][:160]}")


def misspell_probe(objects):
    c = first_container(objects, "Job")
    c["readinesProbe"] = c.pop("readinessProbe")


def unknown_spec_field(objects):
    workload(objects, "Job")["spec"]["restartPolicy"] = "OnFailure"  # belongs in the pod spec


typed_cases = {"a misspelt readinessProbe": (misspell_probe, "readinesProbe"),
               "a pod field in the Job's spec": (unknown_spec_field, "restartPolicy")}
paths = {what: write_typed("broken-" + str(i), broken(change))
         for i, (what, (change, _)) in enumerate(typed_cases.items())}
errors = type_check(list(paths.values()))
for what, (change, field) in typed_cases.items():
    got = errors.get(paths[what], [])
    check(any(field in e and "does not exist" in e for e in got), f"{what}: not rejected as unknown: {got}")
    if got:
        print(f"rejected, {what}: {got[0][:160]}")
    # The JSON schemas alone let it through: why the typed check is there.
    ok, _ = schema_check("broken", broken(change))
    check(ok, f"{what}: expected the JSON schemas to allow it (they allow unknown fields)")

if failures:
    print(f"{len(failures)} checks failed")
    sys.exit(1)
print(f"PASS: {len(manifests)} manifest sets valid against the Kubernetes 1.27 OpenAPI schemas; "
      f"{len(schema_cases) + len(typed_cases)} broken copies rejected")
