"""ModelAPI Hosted mode: a model's weights served by the workload itself (``kora model-hosted``).

- :mod:`kora.resources.hosted_models`: the models Hosted mode serves (all-MiniLM-L6-v2) and why it cannot serve
  others; cheap to import.
- :mod:`kora.hosted.embedder`: all-MiniLM-L6-v2 on sentence-transformers, from the optional ``embeddings``
  extra; the only module that loads the model runtime.
- :mod:`kora.hosted.app`: OpenAI's ``/v1/embeddings`` and ``/v1/models``, ``/health`` and ``/ready``.
- :mod:`kora.hosted.cli`: ``kora model-hosted``.
"""
