#!/usr/bin/env python3
"""Writes JSON schemas in kubeconform's layout (OUT/<kind><kind-suffix>.json, e.g.
deployment-apps-v1.json, service-v1.json), strict: an object that lists its properties takes no
others, as with kubeconform's "-strict" schemas.

Usage: kubeconform-schemas.py OUT swagger.json      Kubernetes' OpenAPI v2 document: one file
                                                    per kind refers to OUT/_definitions.json
       kubeconform-schemas.py OUT crd.json...       CustomResourceDefinitions as JSON (a CRD or
                                                    a List of them): one standalone file per
                                                    served version

deploy/helm/render.sh and scripts/setup.d/72-kubeconform.sh run it.
"""

import json
import os
import sys

INT_OR_STRING = [{"type": "string"}, {"type": "integer"}]


def kind_file(out, group, version, kind):
    """kubeconform's name for a kind: lower-case kind, then the group's first label, version."""
    suffix = f"-{group.split('.')[0].lower()}-{version}" if group else f"-{version}"
    return os.path.join(out, f"{kind.lower()}{suffix}.json")


def strict(node):
    """Closes every object schema that lists properties; int-or-string becomes oneOf."""
    if isinstance(node, list):
        return [strict(n) for n in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key in ("properties", "patternProperties", "definitions") and isinstance(value, dict):
            # Maps of names to schemas, not schemas themselves.
            out[key] = {name: strict(schema) for name, schema in value.items()}
        elif key in ("enum", "default", "example"):
            out[key] = value
        else:
            out[key] = strict(value)
    if out.get("format") == "int-or-string" or out.get("x-kubernetes-int-or-string") is True:
        out.pop("type", None)
        out.pop("format", None)
        out["oneOf"] = INT_OR_STRING
    if ("properties" in out and "additionalProperties" not in out
            and out.get("x-kubernetes-preserve-unknown-fields") is not True):
        out["additionalProperties"] = False
    return out


def from_swagger(out, path):
    with open(path) as f:
        definitions = json.load(f)["definitions"]
    quantity = "io.k8s.apimachinery.pkg.api.resource.Quantity"
    if quantity in definitions:
        # Written as a number or a string (cpu: 1, memory: 1Gi).
        definitions[quantity] = {"oneOf": [{"type": "string"}, {"type": "number"}]}
    with open(os.path.join(out, "_definitions.json"), "w") as f:
        json.dump({"definitions": strict(definitions)}, f)
    count = 0
    for name, schema in definitions.items():
        for gvk in schema.get("x-kubernetes-group-version-kind", []):
            ref = {"$ref": f"_definitions.json#/definitions/{name}"}
            with open(kind_file(out, gvk["group"], gvk["version"], gvk["kind"]), "w") as f:
                json.dump(ref, f)
            count += 1
    return count


def from_crds(out, paths):
    count = 0
    for path in paths:
        with open(path) as f:
            doc = json.load(f)
        crds = doc.get("items", []) if doc.get("kind") == "List" else [doc]
        for crd in crds:
            spec = crd["spec"]
            for version in spec["versions"]:
                schema = dict(version.get("schema", {}).get("openAPIV3Schema", {}))
                props = dict(schema.get("properties", {}))
                for field in ("apiVersion", "kind"):
                    props.setdefault(field, {"type": "string"})
                props.setdefault("metadata", {"type": "object"})
                schema["properties"] = props
                name = kind_file(out, spec["group"], version["name"], spec["names"]["kind"])
                with open(name, "w") as f:
                    json.dump(strict(schema), f)
                count += 1
    return count


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    out, inputs = sys.argv[1], sys.argv[2:]
    os.makedirs(out, exist_ok=True)
    if len(inputs) == 1 and os.path.basename(inputs[0]) == "swagger.json":
        count = from_swagger(out, inputs[0])
    else:
        count = from_crds(out, inputs)
    if count == 0:
        sys.exit(f"kubeconform-schemas.py: no kind in {' '.join(inputs)}")


if __name__ == "__main__":
    main()
