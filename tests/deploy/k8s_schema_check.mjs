// k8s_schema_check.mjs: validates Kubernetes objects against the JSON schemas that
// kubernetes-models generates from the Kubernetes OpenAPI spec (types, required fields, enums,
// formats), each object by its apiVersion and kind.
//   node k8s_schema_check.mjs OBJECTS.json   (a JSON array of objects; NODE_PATH-free: run
//                                              from the directory holding node_modules)
// Prints "ok KIND/NAME" or "invalid KIND/NAME: errors" per object; exits 1 if any is invalid.
import { readFileSync } from "node:fs";

const objects = JSON.parse(readFileSync(process.argv[2], "utf8"));
let bad = 0;
for (const o of objects) {
  const what = `${o.kind}/${o.metadata?.name}`;
  const [group, version] = o.apiVersion.includes("/") ? o.apiVersion.split("/") : [null, o.apiVersion];
  const module = group ? `kubernetes-models/${group}/${version}` : `kubernetes-models/${version}`;
  let Model;
  try {
    Model = (await import(module))[o.kind];
  } catch (e) {
    Model = undefined;
  }
  if (!Model) {
    console.log(`invalid ${what}: no schema for apiVersion ${o.apiVersion} kind ${o.kind}`);
    ++bad;
    continue;
  }
  try {
    new Model(o).validate();
    console.log(`ok ${what}`);
  } catch (e) {
    console.log(`invalid ${what}: ${e.message}`);
    ++bad;
  }
}
process.exit(bad ? 1 : 0);
