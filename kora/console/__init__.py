"""The web console (``kora console``): the graph of a ``kora up`` run, chat with its agents over AG-UI, their
sessions and the memory stores' facts, in a browser (docs/console.md)."""
