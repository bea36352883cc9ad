"""review44: ``HintingSampler`` dropped ``set_epoch``. A training loop calls
``loader.sampler.set_epoch(e)`` so that a DistributedSampler reshuffles each epoch; wrapped by
``VersionDataset.hinting`` the call failed (AttributeError) or, where a loop checks
``hasattr(sampler, "set_epoch")``, was skipped, and every epoch read the first epoch's order.
The wrapper passes it on, and its hints follow the new order."""

from __future__ import annotations

from collections.abc import Sequence

import pytest


class _Hinted:
    """What HintingSampler needs of a dataset: a length (for DistributedSampler) and ``hint``."""

    def __init__(self, n: int) -> None:
        self.n, self.hints = n, []

    def __len__(self) -> int:
        return self.n

    def hint(self, indices: Sequence[int]) -> None:
        self.hints.append(list(indices))


def _distributed(dataset: _Hinted):
    from datahub.torch._torch import torch

    return torch.utils.data.DistributedSampler(dataset, num_replicas=2, rank=1, shuffle=True, seed=7)


def test_set_epoch_reaches_a_wrapped_distributed_sampler_and_the_hints_follow() -> None:
    from datahub.torch.datasets import HintingSampler

    dataset = _Hinted(40)
    sampler = HintingSampler(_distributed(dataset), dataset, lookahead=8)  # type: ignore[arg-type]
    reference = _distributed(_Hinted(40))
    orders = []
    for epoch in range(3):
        sampler.set_epoch(epoch)
        reference.set_epoch(epoch)
        dataset.hints.clear()
        order = list(sampler)
        assert order == list(reference)  # the inner sampler's order of this epoch
        assert dataset.hints == [order[i : i + 8] for i in range(0, len(order), 8)]
        orders.append(order)
    assert orders[0] != orders[1] != orders[2]  # reshuffled each epoch
    assert len(sampler) == 20


def test_set_epoch_on_a_sampler_without_one_is_a_no_op_and_iteration_is_unchanged() -> None:
    from datahub.torch.datasets import HintingSampler

    dataset = _Hinted(5)
    sampler = HintingSampler([4, 2, 0, 1, 3], dataset, lookahead=2)  # type: ignore[arg-type]
    sampler.set_epoch(3)  # a plain order (or RandomSampler) has no epochs: nothing to pass on
    assert list(sampler) == [4, 2, 0, 1, 3]
    assert dataset.hints == [[4, 2], [0, 1], [3]]


@pytest.mark.parametrize("epoch", [0, 5])
def test_the_epoch_is_passed_as_given(epoch: int) -> None:
    from datahub.torch.datasets import HintingSampler

    seen = []

    class Inner(list):
        def set_epoch(self, e: int) -> None:
            seen.append(e)

    HintingSampler(Inner([0]), _Hinted(1), lookahead=1).set_epoch(epoch)  # type: ignore[arg-type]
    assert seen == [epoch]
