"""``kora model-hosted``: ModelAPI Hosted mode, which Kora cannot serve in this build.

Hosted mode means "run the model's weights here" (``spec.hostedConfig.model``). That needs an inference
server (e.g. vLLM, llama.cpp's server or Ollama) and the model's weights, neither of which Kora ships. The
command prints :data:`HOSTED_UNSUPPORTED` and exits 3; ``kora up`` does not start it and reports the
workload as Failed with the same message.
"""

from __future__ import annotations

import sys

__all__ = ["HOSTED_UNSUPPORTED", "cli"]

#: What is missing, and what to use instead.
HOSTED_UNSUPPORTED = (
    "ModelAPI mode Hosted is not supported: Kora ships no inference server and no model weights. "
    "Run one yourself (Ollama, vLLM, llama.cpp server) and point a ModelAPI with mode: Proxy at its "
    "OpenAI-compatible /v1 URL, or use mode: Scripted offline."
)


def cli(argv: list[str]) -> int:
    """Print why Hosted mode cannot run and return 3."""
    print(f"kora model-hosted: {HOSTED_UNSUPPORTED}", file=sys.stderr)
    return 3
