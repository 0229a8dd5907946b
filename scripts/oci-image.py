#!/usr/bin/env python3
"""Packs files into a single-layer container image, written as an OCI image layout tar
(https://github.com/opencontainers/image-spec: oci-layout, index.json, blobs/sha256/...), with no
registry, daemon or network. `ctr images import` loads the tar; the image's name is the
`io.containerd.image.name` annotation of index.json. The same inputs give the same bytes.

  oci-image.py --name docker.io/library/wasmop:dev --out wasmop.tar \\
      --file dist/wasmop:/wasmop --entrypoint /wasmop --cmd run --user 65532:65532 \\
      --env WASMOP_CACHE_DIR=/var/cache/wasmop/components --port 8080
"""

import argparse
import gzip
import hashlib
import io
import json
import os
import tarfile

PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def layer(files, dirs):
    """An uncompressed tar of `files` (SOURCE:DEST, mode kept) and empty `dirs` (DEST:MODE)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        entries = []
        for spec in dirs:
            dest, mode = spec.rsplit(":", 1)
            entries.append((dest.strip("/"), None, int(mode, 8)))
        for spec in files:
            source, dest = spec.rsplit(":", 1)
            entries.append((dest.strip("/"), source, None))
        parents = set()
        for dest, _, _ in entries:
            parts = dest.split("/")[:-1]
            parents.update("/".join(parts[: i + 1]) for i in range(len(parts)))
        named = {dest for dest, _, _ in entries}
        entries += [(p, None, 0o755) for p in parents - named]
        for dest, source, mode in sorted(entries):
            info = tarfile.TarInfo(dest)
            info.uid = info.gid = 0
            info.mtime = 0
            if source is None:
                info.type = tarfile.DIRTYPE
                info.mode = mode
                tar.addfile(info)
            else:
                with open(source, "rb") as f:
                    data = f.read()
                info.size = len(data)
                info.mode = os.stat(source).st_mode & 0o7777
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def blob(out, data, media_type):
    """Adds `data` under blobs/sha256/ of the layout and returns its descriptor."""
    digest = hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo(f"blobs/sha256/{digest}")
    info.size, info.mode, info.mtime = len(data), 0o644, 0
    out.addfile(info, io.BytesIO(data))
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}


def canonical(value):
    return json.dumps(value, separators=(",", ":"), sort_keys=True).encode()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--name", required=True, help="image reference, e.g. docker.io/library/x:tag")
    p.add_argument("--out", required=True, help="the OCI layout tar to write")
    p.add_argument("--file", action="append", default=[], help="SOURCE:DEST, repeatable")
    p.add_argument("--dir", action="append", default=[], help="an empty DEST:MODE, repeatable")
    p.add_argument("--entrypoint", action="append", default=[], help="one argument, repeatable")
    p.add_argument("--cmd", action="append", default=[], help="one argument, repeatable")
    p.add_argument("--user", default="")
    p.add_argument("--env", action="append", default=[], help="KEY=VALUE, repeatable")
    p.add_argument("--port", action="append", default=[], help="an exposed TCP port, repeatable")
    p.add_argument("--label", action="append", default=[], help="KEY=VALUE, repeatable")
    args = p.parse_args()

    tar_bytes = layer(args.file, args.dir)
    config = {
        "architecture": "amd64",
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": {
            "Env": [f"PATH={PATH}"] + args.env,
            "Entrypoint": args.entrypoint or None,
            "Cmd": args.cmd or None,
            "User": args.user,
            "ExposedPorts": {f"{port}/tcp": {} for port in args.port},
            "Labels": dict(label.split("=", 1) for label in args.label),
        },
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(tar_bytes).hexdigest()]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "scripts/oci-image.py"}],
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    tmp = f"{args.out}.{os.getpid()}.tmp"
    with tarfile.open(tmp, mode="w", format=tarfile.PAX_FORMAT) as out:
        layer_desc = blob(out, gzip.compress(tar_bytes, compresslevel=6, mtime=0),
                          "application/vnd.oci.image.layer.v1.tar+gzip")
        config_desc = blob(out, canonical(config), "application/vnd.oci.image.config.v1+json")
        manifest = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": config_desc,
            "layers": [layer_desc],
        }
        manifest_desc = blob(out, canonical(manifest), "application/vnd.oci.image.manifest.v1+json")
        manifest_desc["platform"] = {"architecture": "amd64", "os": "linux"}
        manifest_desc["annotations"] = {
            "io.containerd.image.name": args.name,
            "org.opencontainers.image.ref.name": args.name.rsplit(":", 1)[-1],
        }
        index = {
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "manifests": [manifest_desc],
        }
        for name, data in (("oci-layout", canonical({"imageLayoutVersion": "1.0.0"})),
                           ("index.json", canonical(index))):
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            out.addfile(info, io.BytesIO(data))
    os.replace(tmp, args.out)
    print(f"{args.out}: {args.name} {manifest_desc['digest']}")


if __name__ == "__main__":
    main()
