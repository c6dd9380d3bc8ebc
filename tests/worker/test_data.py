"""Loading by name; each rank's shard: disjoint, equal, reshuffled per epoch; validation covers every sample once."""

from __future__ import annotations

import torch

from contract.spec import Dataset
from tests.factories import spec
from worker import data


def test_train_shards_are_disjoint_equal_and_whole_batches():
    world, batch = 3, 16
    shards = [data.train_shard(1000, rank, world, seed=0, epoch=1, per_rank_batch=batch) for rank in range(world)]
    sizes = {len(shard) for shard in shards}
    assert sizes == {1000 // (world * batch) * batch}
    joined = torch.cat(shards)
    assert len(set(joined.tolist())) == len(joined)


def test_one_global_batch_is_the_same_samples_whatever_the_world_size():
    single = data.train_shard(256, 0, 1, seed=7, epoch=1, per_rank_batch=64)[:64]
    pair = [data.train_shard(256, rank, 2, seed=7, epoch=1, per_rank_batch=32)[:32] for rank in range(2)]
    assert sorted(single.tolist()) == sorted(torch.cat(pair).tolist())


def test_reshuffled_each_epoch_but_reproducible():
    first = data.train_shard(512, 0, 2, seed=1, epoch=1, per_rank_batch=8)
    assert torch.equal(first, data.train_shard(512, 0, 2, seed=1, epoch=1, per_rank_batch=8))
    assert not torch.equal(first, data.train_shard(512, 0, 2, seed=1, epoch=2, per_rank_batch=8))


def test_validation_covers_every_sample_once():
    shards = [data.val_shard(1001, rank, 4) for rank in range(4)]
    assert sorted(torch.cat(shards).tolist()) == list(range(1001))


def test_load_picks_the_data_set_by_name():
    assert set(data.LOADERS) == set(Dataset)
    bundle = data.load(spec(model="mlp", dataset="synthetic"), rank=0)
    assert (bundle.sample_shape, bundle.num_classes, bundle.task) == ((32,), 10, "classification")
    assert len(bundle.train) == len(bundle.train.inputs) == 8192
    bundle = data.load(spec(model="gpt", dataset="synthetic", context=16), rank=0)
    assert (bundle.sample_shape, bundle.task) == ((16,), "language")
