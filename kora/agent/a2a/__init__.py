"""A2A protocol for the agent server: tasks, the agent card, task states (docs/a2a.md).

Modules: :mod:`.paths` and :mod:`.lazy` (A2A's routes in the app before the SDK has loaded, so ``/health``
answers first), :mod:`.routes` (the :class:`~kora.agent.a2a.routes.A2AServer` behind them: JSON-RPC 2.0 on
``POST /``), :mod:`.rest` (the HTTP+JSON binding, the SDK's routes under Kora's checks), :mod:`.card` (agent
card), :mod:`.executor` (runs Kora turns as A2A tasks), :mod:`.store` (task stores selected by
``task_store_type``), :mod:`.shared` (the ``postgres`` store shared by replicas: cancel signal, leases,
retention), :mod:`.push` (push notifications delivered in the background), :mod:`.legacy` (JSON-RPC batches and
the legacy ``tasks/send`` names) and :mod:`.negotiation` (the ``A2A-Version`` a request speaks). The official
``a2a-sdk`` does the protocol work; Kora adds what the SDK does not speak.
"""
