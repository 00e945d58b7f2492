"""Writes the quickstart manifests with the Scripted ModelAPI swapped for a Proxy to a real model.

Usage: python real_model.py SOURCE.yaml TARGET.yaml, with MODEL_API_URL, MODEL_NAME and optionally
MODEL_API_KEY in the environment. The same edit by hand is documented in examples/quickstart/README.md.

The key itself is never written: with MODEL_API_KEY set, the ModelAPI's apiKey references the Secret key
``model-api/api-key`` (:data:`SECRET`), which ``kora up --secret-env model-api/api-key=MODEL_API_KEY`` reads
from the environment.
"""

import os
import sys

import yaml

#: The Secret name and key the ModelAPI's apiKey references (scripts/quickstart.sh gives it with --secret-env).
SECRET = {"name": "model-api", "key": "api-key"}

source, target = sys.argv[1], sys.argv[2]
with open(source, encoding="utf-8") as manifests:
    documents = list(yaml.safe_load_all(manifests))
for document in documents:
    if document["kind"] == "ModelAPI":
        proxy: dict[str, object] = {"apiBase": os.environ["MODEL_API_URL"]}
        if os.environ.get("MODEL_API_KEY"):
            proxy["apiKey"] = {"valueFrom": {"secretKeyRef": SECRET}}
        document["spec"] = {"mode": "Proxy", "proxyConfig": proxy}
    elif document["kind"] == "Agent":
        document["spec"]["model"] = os.environ["MODEL_NAME"]
with open(target, "w", encoding="utf-8") as out:
    yaml.safe_dump_all(documents, out, sort_keys=False)
