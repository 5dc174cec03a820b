#!/usr/bin/env python3
"""Validates deploy/ against Kubernetes' schemas (kubernetes-validate, strict: unknown fields fail).

Renders each kustomization the way `kustomize build` would for what these use (resources,
strategic-merge patches of DaemonSets, a configMapGenerator replacing a ConfigMap's files), then
validates every rendered object. Writes each ConfigMap's quiver.toml to OUT_DIR (argument 1) so
that the caller can load them with Quiver's own parser. Exits non-zero on the first problem.

    python3 deploy/validate.py OUT_DIR [KUBERNETES_VERSION]
"""

import copy
import os
import sys

import kubernetes_validate
import yaml

HERE = os.path.dirname(os.path.abspath(__file__))
# Lists merged by the name of their elements, as strategic merge patch does for these fields.
MERGE_BY_NAME = {"containers", "volumes", "volumeMounts", "env"}


def load_all(path):
    with open(path) as f:
        return [d for d in yaml.safe_load_all(f) if d]


def merge(base, patch, key=None):
    if isinstance(base, dict) and isinstance(patch, dict):
        out = dict(base)
        for k, v in patch.items():
            out[k] = merge(base[k], v, k) if k in base else copy.deepcopy(v)
        return out
    if isinstance(base, list) and isinstance(patch, list) and key in MERGE_BY_NAME:
        out = [copy.deepcopy(b) for b in base]
        for p in patch:
            i = next((i for i, b in enumerate(out) if b.get("name") == p.get("name")), None)
            if i is None:
                out.append(copy.deepcopy(p))
            else:
                out[i] = merge(out[i], p)
        return out
    return copy.deepcopy(patch)


def render(directory):
    kfile = os.path.join(directory, "kustomization.yaml")
    k = load_all(kfile)[0]
    assert k.get("kind") == "Kustomization", kfile
    objects = []
    for r in k.get("resources", []):
        path = os.path.join(directory, r)
        if os.path.isdir(path):
            objects += render(path)
        else:
            objects += load_all(path)
    for p in k.get("patches", []):
        for patch in load_all(os.path.join(directory, p["path"])):
            matches = [
                i
                for i, o in enumerate(objects)
                if o["kind"] == patch["kind"] and o["metadata"]["name"] == patch["metadata"]["name"]
            ]
            assert matches, "%s: patch for %s matches nothing" % (kfile, patch["metadata"]["name"])
            for i in matches:
                objects[i] = merge(objects[i], patch)
    for g in k.get("configMapGenerator", []):
        data = {}
        for f in g.get("files", []):
            with open(os.path.join(directory, f)) as fh:
                data[os.path.basename(f)] = fh.read()
        target = [o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == g["name"]]
        if g.get("behavior") == "replace":
            assert target, "%s: configMapGenerator replaces %s, which is not there" % (kfile, g["name"])
            for o in target:
                o["data"] = data
        else:
            objects.append({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": g["name"]}, "data": data})
    namespace = k.get("namespace")
    for o in objects:
        if namespace:
            o["metadata"]["namespace"] = namespace
    return objects


def check_selector(directory, ds):
    """The API server refuses a DaemonSet whose selector does not match its pods' labels (a
    rule the schemas do not carry): check it, and say what the pods are labelled."""
    selector = ds["spec"]["selector"].get("matchLabels", {})
    labels = ds["spec"]["template"]["metadata"].get("labels", {})
    for k, v in selector.items():
        if labels.get(k) != v:
            sys.exit("%s: selector %s=%s does not match the pods' labels %s" % (directory, k, v, labels))
    print("%s: pods labelled app=%s" % (directory, labels.get("app")))


def main():
    out_dir = sys.argv[1]
    version = sys.argv[2] if len(sys.argv) > 2 else "1.30.0"
    os.makedirs(out_dir, exist_ok=True)
    overlays = [("base", "base"), ("dpdk", "overlays/dpdk"), ("nsm-compat", "overlays/nsm-compat")]
    for name, directory in overlays:
        objects = render(os.path.join(HERE, directory))
        kinds = sorted(o["kind"] for o in objects)
        assert kinds == ["ConfigMap", "DaemonSet"], "%s renders %s" % (directory, kinds)
        for o in objects:
            kubernetes_validate.validate(o, version, strict=True)
            if o["kind"] == "DaemonSet":
                check_selector(directory, o)
            if o["kind"] == "ConfigMap":
                with open(os.path.join(out_dir, name + ".toml"), "w") as f:
                    f.write(o["data"]["quiver.toml"])
            print("%s: %s/%s valid against Kubernetes %s" % (directory, o["kind"], o["metadata"]["name"], version))


if __name__ == "__main__":
    try:
        main()
    except kubernetes_validate.ValidationError as e:
        # The schema dump that str(e) carries drowns the point: say where and what.
        where = "/".join(str(p) for p in e.path)
        sys.exit("invalid at %s: %s" % (where, e.message))
