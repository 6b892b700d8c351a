#!/usr/bin/env python3
"""Writes an OCI image archive (what `ctr images import` reads) of one
uncompressed layer made from a directory: no registry and no image builder
needed. Deterministic: the same tree gives the same digests.

usage: oci_image.py ROOTFS NAME:TAG OUT.tar ENTRYPOINT [ARG...]
"""
import hashlib
import io
import json
import os
import sys
import tarfile


def layer_of(root):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames.sort()
            for name in sorted(dirnames) + sorted(filenames):
                full = os.path.join(dirpath, name)
                info = t.gettarinfo(full, arcname=os.path.relpath(full, root))
                info.uid = info.gid = 0
                info.uname = info.gname = "root"
                info.mtime = 0
                if info.isfile():
                    with open(full, "rb") as f:
                        t.addfile(info, f)
                else:
                    t.addfile(info)
    return buf.getvalue()


def blob(out, data):
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    info = tarfile.TarInfo("blobs/sha256/" + digest.split(":")[1])
    info.size = len(data)
    out.addfile(info, io.BytesIO(data))
    return digest


def main():
    root, ref, path, entry = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    layer = layer_of(root)
    with tarfile.open(path, "w") as out:
        layer_digest = blob(out, layer)
        config = json.dumps({
            "architecture": "amd64",
            "os": "linux",
            "config": {"Entrypoint": entry, "Env": ["PATH=/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"]},
            "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        }, sort_keys=True).encode()
        config_digest = blob(out, config)
        manifest = json.dumps({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                       "digest": config_digest, "size": len(config)},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar",
                        "digest": layer_digest, "size": len(layer)}],
        }, sort_keys=True).encode()
        manifest_digest = blob(out, manifest)
        index = json.dumps({
            "schemaVersion": 2,
            "manifests": [{
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": manifest_digest, "size": len(manifest),
                "annotations": {"io.containerd.image.name": ref,
                                "org.opencontainers.image.ref.name": ref.rsplit(":", 1)[1]},
            }],
        }, sort_keys=True).encode()
        for name, data in (("oci-layout", b'{"imageLayoutVersion":"1.0.0"}'), ("index.json", index)):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            out.addfile(info, io.BytesIO(data))


if __name__ == "__main__":
    main()
