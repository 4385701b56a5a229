// Schema check of the Kubernetes manifests: every document is validated
// against the Kubernetes OpenAPI schema of its kind, as compiled into the npm
// package kubernetes-models (required fields, types, int32/quantity formats).
// Those schemas allow unknown fields, so validate_test.go (strict decoding
// into the k8s.io/api Go types) catches misspelt ones. Run:
//
//   cd deploy/kubernetes/validate && npm ci && npm run validate
import { readFileSync } from "node:fs";
import { parseAllDocuments } from "yaml";
import { Deployment } from "kubernetes-models/apps/v1";
import { Service } from "kubernetes-models/v1";
import { PodDisruptionBudget } from "kubernetes-models/policy/v1";

const kinds = {
  "apps/v1 Deployment": Deployment,
  "v1 Service": Service,
  "policy/v1 PodDisruptionBudget": PodDisruptionBudget,
};
let failed = 0;
let checked = 0;
for (const file of process.argv.slice(2)) {
  for (const doc of parseAllDocuments(readFileSync(file, "utf8"))) {
    if (doc.errors.length) {
      failed++;
      console.log(`FAIL ${file}: ${doc.errors[0].message}`);
      continue;
    }
    const obj = doc.toJS();
    if (!obj) continue; // a document of comments only
    const Kind = kinds[`${obj.apiVersion} ${obj.kind}`];
    const name = `${file} ${obj.kind} ${obj.metadata?.name}`;
    if (!Kind) {
      failed++;
      console.log(`FAIL ${name}: no schema for ${obj.apiVersion} ${obj.kind} in this check`);
      continue;
    }
    try {
      new Kind(obj).validate();
      checked++;
      console.log(`ok   ${name}`);
    } catch (e) {
      failed++;
      console.log(`FAIL ${name}: ${e.message}`);
    }
  }
}
console.log(`${checked} passed, ${failed} failed`);
process.exit(failed || !checked ? 1 : 0);
