#!/usr/bin/env python3
"""Cluster DNS of the test node (scripts/k8s/start-node.sh), standing in for CoreDNS, which Debian does not ship.

Every second it lists the cluster's Services and Endpoints and, when the answer changed, rewrites one hosts file
that dnsmasq (started with ``--hostsdir`` on that file's directory) reloads by itself. Pods resolve through the
kubelet's ``clusterDNS`` address, a Service in front of dnsmasq; their resolv.conf search list turns ``svc`` and
``svc.ns`` into the names written here.

Records (the part of the Kubernetes DNS specification that finding a Service by name needs):
  ``<svc>.<ns>.svc.<domain>``  -> the Service's cluster IP, or for a headless Service every ready endpoint
  ``<host>.<svc>.<ns>.svc.<domain>`` -> a ready endpoint that names a hostname (StatefulSet pods)
Not served: SRV records, pod A records, ExternalName Services.

Usage: node-dns.py KUBECONFIG HOSTS_FILE [DOMAIN]. The kubeconfig is the one start-node.sh writes (a bearer token,
the server's certificate not checked: the API server listens on the node's bridge only). Standard library only,
so it runs on the host's python3 before any virtualenv exists. Errors (the API server restarting) are printed
and the last good file is kept.
"""

from __future__ import annotations

import json
import os
import re
import ssl
import sys
import time
import urllib.request


def read_kubeconfig(path: str) -> tuple[str, str]:
    """``(server URL, bearer token)`` of the flat kubeconfig start-node.sh writes (no YAML parser needed)."""
    with open(path, encoding="utf-8") as file:
        text = file.read()
    server = re.search(r"server:\s*\"?([^\"\s}]+)", text)
    token = re.search(r"token:\s*\"?([^\"\s}]+)", text)
    if server is None or token is None:
        raise SystemExit(f"node-dns: {path} names no server or token")
    return server.group(1), token.group(1)


def records(services: list[dict], endpoints: list[dict], domain: str) -> list[str]:
    """Hosts-file lines (``address name...``), sorted, for ``services`` and their ``endpoints`` (API list items)."""
    by_name = {(e["metadata"]["namespace"], e["metadata"]["name"]): e for e in endpoints}
    lines = []
    for service in services:
        namespace, name = service["metadata"]["namespace"], service["metadata"]["name"]
        fqdn = f"{name}.{namespace}.svc.{domain}"
        cluster_ip = service["spec"].get("clusterIP")
        if cluster_ip and cluster_ip != "None":
            lines.append(f"{cluster_ip} {fqdn}")
            continue
        for subset in by_name.get((namespace, name), {}).get("subsets") or []:
            for address in subset.get("addresses") or []:
                names = [f"{address['hostname']}.{fqdn}"] if address.get("hostname") else []
                lines.append(" ".join([address["ip"], *names, fqdn]))
    return sorted(lines)


def main() -> None:
    kubeconfig, hosts_file = sys.argv[1], sys.argv[2]
    domain = sys.argv[3] if len(sys.argv) > 3 else "cluster.local"
    server, token = read_kubeconfig(kubeconfig)
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE

    def items(path: str) -> list[dict]:
        request = urllib.request.Request(server + path, headers={"Authorization": f"Bearer {token}"})
        with urllib.request.urlopen(request, context=context, timeout=10) as response:
            return json.load(response)["items"]

    written = None
    while True:
        try:
            text = "".join(
                f"{line}\n" for line in records(items("/api/v1/services"), items("/api/v1/endpoints"), domain)
            )
            if text != written:
                # A dot file: dnsmasq reads every other file of the directory as hosts.
                temporary = os.path.join(os.path.dirname(hosts_file), f".{os.path.basename(hosts_file)}.tmp")
                with open(temporary, "w", encoding="utf-8") as out:
                    out.write(text)
                os.replace(temporary, hosts_file)
                written = text
        except (OSError, ValueError, KeyError) as error:
            print(f"node-dns: {error}", file=sys.stderr, flush=True)
        time.sleep(1)


if __name__ == "__main__":
    main()
