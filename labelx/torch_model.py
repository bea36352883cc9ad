"""The one LabelX module that imports torch: load a classifier and run it on RGB pixels.

A model is either a TorchScript file (``/path/model.pt``) or a Python callable named
``package.module:function``. Both take a float tensor ``[N, 3, side, side]`` with values in
0..1 and return logits or probabilities ``[N, num_classes]``, in the schema's class order.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from datahub.errors import InvalidInput

Classifier = Callable[[Sequence[bytes], int], list[tuple[int, float]]]


def load_classifier(spec: str, num_classes: int) -> Classifier:
    """Return ``classify(pixels, side) -> [(class index, score), ...]``."""
    model = _load(spec)

    @torch.inference_mode()
    def classify(pixels: Sequence[bytes], side: int) -> list[tuple[int, float]]:
        batch = torch.stack(
            [torch.frombuffer(bytearray(p), dtype=torch.uint8).view(side, side, 3) for p in pixels]
        )
        x = batch.permute(0, 3, 1, 2).float().div_(255.0)
        out = model(x)
        if not isinstance(out, torch.Tensor) or out.ndim != 2 or out.shape[1] != num_classes:
            raise InvalidInput(
                f"model {spec!r} returned {getattr(out, 'shape', type(out))}; expected [N, {num_classes}] "
                "scores in the project's class order"
            )
        probs = (
            out.float().softmax(dim=1) if (out.min() < 0 or out.sum(dim=1).gt(1.001).any()) else out.float()
        )
        score, idx = probs.max(dim=1)
        return [(int(i), float(s)) for i, s in zip(idx.tolist(), score.tolist(), strict=True)]

    return classify


def _load(spec: str) -> Callable[[torch.Tensor], torch.Tensor]:
    if ":" in spec and not Path(spec).exists():
        module_name, _, func = spec.partition(":")
        try:
            fn = getattr(importlib.import_module(module_name), func)
        except (ImportError, AttributeError) as exc:
            raise InvalidInput(f"cannot load model callable {spec!r}: {exc}") from exc
        if not callable(fn):
            raise InvalidInput(f"{spec!r} is not callable")
        return fn
    if not Path(spec).is_file():
        raise InvalidInput(f"model file {spec!r} not found; give a TorchScript file or module:function")
    try:
        model = torch.jit.load(spec, map_location="cpu")
    except (RuntimeError, ValueError) as exc:
        raise InvalidInput(f"{spec!r} is not a TorchScript model ({exc})") from exc
    model.eval()
    return model
