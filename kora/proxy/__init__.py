"""HTTP forwarding: the one reverse proxy Kora writes.

- :mod:`kora.proxy.forward`: :func:`forward` streams one request to an upstream URL and the response back
  chunk by chunk (502/504 JSON when the upstream is down or slow). Used by the local gateway
  (:mod:`kora.local.gateway`) and by ``kora model-proxy``.
- :mod:`kora.proxy.model_proxy`: a ModelAPI in Proxy mode; :mod:`kora.proxy.cli`: its command, ``kora model-proxy``.
"""
