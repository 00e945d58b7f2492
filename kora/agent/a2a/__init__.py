"""A2A protocol for the agent server (spec: "Task (A2A)", "Agent card", "States and transitions / A2A task").

Modules: :mod:`.card` (agent card), :mod:`.executor` (runs Kora turns as A2A tasks), :mod:`.store` (task
stores selected by ``task_store_type``), :mod:`.shared` (the ``postgres`` store shared by replicas: cancel
signal, leases, retention), :mod:`.push` (push notifications delivered in the background), :mod:`.legacy`
(JSON-RPC batches and the legacy ``tasks/send`` names), :mod:`.routes` (adds A2A's routes to the app). The
official ``a2a-sdk`` does the protocol work; Kora adds what the SDK does not speak.
"""
