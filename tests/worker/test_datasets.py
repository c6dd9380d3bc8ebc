"""Each data set: shapes and dtypes, seeding, and the CIFAR-10 files (written by the tests, never downloaded)."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from contract.configs import SYNTHETIC_SEQUENCES, SYNTHETIC_VOCAB, TEXT_MAX_CHARS
from tests.factories import spec
from tests.worker.cifar_fixture import write_cifar10
from worker.datasets import cifar10, digits, synthetic, text


def assert_same_bundle(a, b):
    for split_a, split_b in ((a.train, b.train), (a.val, b.val)):
        assert torch.equal(split_a.inputs, split_b.inputs)
        assert torch.equal(split_a.targets, split_b.targets)


# --- synthetic ---


@pytest.mark.parametrize(
    ("model", "train_shape", "val_shape", "dtype", "classes"),
    [
        ("mlp", (8192, 32), (2048, 32), torch.float32, 10),
        ("cnn", (2048, 3, 32, 32), (512, 3, 32, 32), torch.float32, 10),
        ("resnet18", (2048, 3, 32, 32), (512, 3, 32, 32), torch.float32, 10),
        ("gpt", (2048, 64), (256, 64), torch.long, 64),
    ],
)
def test_synthetic_takes_the_shape_the_model_reads(model, train_shape, val_shape, dtype, classes):
    bundle = synthetic.load(spec(model=model, dataset="synthetic"), rank=0)
    assert (tuple(bundle.train.inputs.shape), tuple(bundle.val.inputs.shape)) == (train_shape, val_shape)
    assert bundle.sample_shape == train_shape[1:]
    assert bundle.train.inputs.dtype == dtype
    assert bundle.train.targets.dtype == torch.long
    assert bundle.num_classes == classes
    assert bundle.train.targets.unique().numel() == classes
    assert bundle.augment is None


@pytest.mark.parametrize("model", ["mlp", "cnn", "gpt"])
def test_synthetic_is_seeded(model):
    a, b, c = (synthetic.load(spec(model=model, seed=seed), rank=0) for seed in (3, 3, 4))
    assert_same_bundle(a, b)
    assert not torch.equal(a.train.inputs, c.train.inputs)


def test_synthetic_vectors_are_the_generator_runs_had_before():
    """Gaussian clusters drawn in the order earlier versions drew them, so old mlp runs stay comparable."""
    gen = torch.Generator().manual_seed(5)
    centres = torch.randn(10, 32, generator=gen) * 1.5
    targets = torch.randint(10, (8192,), generator=gen)
    inputs = centres[targets] + torch.randn(8192, 32, generator=gen) * 2.0
    bundle = synthetic.vectors(5)
    assert torch.equal(bundle.train.inputs, inputs)
    assert torch.equal(bundle.train.targets, targets)


def test_synthetic_tokens_follow_a_sparse_chain_and_targets_are_the_next_tokens():
    bundle = synthetic.load(spec(model="gpt", context=16), rank=0)
    inputs, targets = bundle.train.inputs, bundle.train.targets
    assert inputs.shape == targets.shape == (SYNTHETIC_SEQUENCES.train, 16)
    assert torch.equal(inputs[:, 1:], targets[:, :-1])
    assert int(inputs.min()) >= 0 and int(targets.max()) < SYNTHETIC_VOCAB
    pairs = torch.stack([inputs.flatten(), targets.flatten()], dim=1).unique(dim=0)
    followers = torch.bincount(pairs[:, 0], minlength=SYNTHETIC_VOCAB)
    assert int(followers.max()) <= synthetic.SUCCESSORS  # learnable: far fewer choices than the vocabulary


# --- digits ---


def test_digits_are_split_80_20_standardised_and_seeded():
    bundle = digits.load(spec(dataset="digits"), rank=0)
    assert (len(bundle.train), len(bundle.val)) == (1438, 359)
    assert bundle.train.inputs.shape == (1438, 64)
    assert bundle.train.inputs.dtype == torch.float32
    assert (bundle.num_classes, bundle.sample_shape, bundle.task) == (10, (64,), "classification")
    assert float(bundle.train.inputs.mean()) == pytest.approx(0.0, abs=1e-5)
    assert float(bundle.train.inputs.std()) == pytest.approx(1.0, abs=1e-4)
    assert bundle.val.targets.unique().numel() == 10
    assert_same_bundle(bundle, digits.load(spec(dataset="digits"), rank=0))
    other = digits.load(spec(dataset="digits", seed=1), rank=0)
    assert not torch.equal(bundle.val.targets, other.val.targets)


# --- text ---


def test_text_windows_follow_each_other_and_targets_are_shifted():
    bundle = text.load(spec(model="gpt", dataset="text", context=32), rank=0)
    inputs, targets = bundle.train.inputs, bundle.train.targets
    assert inputs.shape[1] == targets.shape[1] == 32
    assert bundle.sample_shape == (32,)
    assert inputs.dtype == targets.dtype == torch.long
    assert torch.equal(inputs[:, 1:], targets[:, :-1])
    # Non-overlapping windows cut from one stream: each window's last target opens the next window.
    assert torch.equal(targets[:-1, -1], inputs[1:, 0])
    assert len(bundle.val) > 0
    assert len(bundle.train) == pytest.approx(9 * len(bundle.val), rel=0.01)
    assert int(inputs.max()) < bundle.num_classes


def test_text_vocabulary_is_the_sorted_characters_of_a_fixed_corpus():
    corpus = text.corpus()
    assert corpus == text.corpus()
    assert 50_000 <= len(corpus) <= TEXT_MAX_CHARS
    assert "def " in corpus
    a = text.load(spec(model="gpt", dataset="text"), rank=0)
    assert a.num_classes == len(set(corpus))
    assert a.train.inputs.shape[1] == 64  # gpt's default context
    vocab = sorted(set(corpus))
    assert "".join(vocab[int(i)] for i in a.train.inputs[0]) == corpus[:64]
    assert_same_bundle(a, text.load(spec(model="gpt", dataset="text", seed=9), rank=0))


def test_text_refuses_a_context_longer_than_the_validation_text():
    with pytest.raises(ValueError, match="too long for the text corpus"):
        text.load(spec(model="gpt", dataset="text", context=60_000), rank=0)


# --- cifar10 ---


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv(cifar10.DATA_DIR_ENV, str(tmp_path))
    monkeypatch.delenv(cifar10.DOWNLOAD_ENV, raising=False)
    return tmp_path


def cifar_spec():
    return spec(model="cnn", dataset="cifar10")


def test_cifar10_reads_the_official_format(data_dir):
    written = write_cifar10(data_dir, per_batch=20, test=20)
    bundle = cifar10.load(cifar_spec(), rank=0)
    assert bundle.train.inputs.shape == (100, 3, 32, 32)
    assert bundle.val.inputs.shape == (20, 3, 32, 32)
    assert bundle.train.inputs.dtype == torch.float32
    assert (bundle.num_classes, bundle.sample_shape, bundle.task) == (10, (3, 32, 32), "classification")
    train_labels = [label for name in cifar10.TRAIN_FILES for label in written[name][1]]
    assert bundle.train.targets.tolist() == train_labels
    assert bundle.val.targets.tolist() == written[cifar10.VAL_FILE][1]
    # Rows are 1024 red, then 1024 green, then 1024 blue values; normalised by the channel statistics.
    raw = torch.from_numpy(written[cifar10.VAL_FILE][0].astype(np.float32)).view(20, 3, 32, 32) / 255
    mean, std = torch.tensor(cifar10.MEAN).view(3, 1, 1), torch.tensor(cifar10.STD).view(3, 1, 1)
    torch.testing.assert_close(bundle.val.inputs, (raw - mean) / std)


def test_cifar10_data_dir_defaults_to_the_user_cache(monkeypatch):
    monkeypatch.delenv(cifar10.DATA_DIR_ENV, raising=False)
    assert cifar10.data_dir() == Path(os.path.expanduser("~/.cache/scalelab/data"))


def test_missing_cifar10_says_where_to_put_it(data_dir):
    with pytest.raises(FileNotFoundError) as caught:
        cifar10.load(cifar_spec(), rank=0)
    message = str(caught.value)
    assert str(data_dir / "cifar-10-batches-py") in message
    assert "data_batch_1" in message and "test_batch" in message
    assert cifar10.DATA_DIR_ENV in message and f"{cifar10.DOWNLOAD_ENV}=1" in message


def test_a_partial_copy_names_the_missing_files(data_dir):
    write_cifar10(data_dir)
    (data_dir / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(FileNotFoundError, match="lacks data_batch_3"):
        cifar10.load(cifar_spec(), rank=0)


@pytest.fixture
def fake_download(data_dir, monkeypatch):
    """torchvision's CIFAR10(download=True), standing in for the network: it writes the small archive."""
    calls = []

    def fake(root, train=True, download=False, **_):
        calls.append((root, download))
        write_cifar10(Path(root))

    monkeypatch.setattr("torchvision.datasets.CIFAR10", fake)
    monkeypatch.setenv(cifar10.DOWNLOAD_ENV, "1")
    return calls


def test_only_rank_0_downloads(data_dir, fake_download):
    with pytest.raises(FileNotFoundError, match="only rank 0 downloads"):
        cifar10.load(cifar_spec(), rank=1)
    assert fake_download == []

    assert len(cifar10.load(cifar_spec(), rank=0).train) == 100
    assert fake_download == [(str(data_dir), True)]

    assert len(cifar10.load(cifar_spec(), rank=1).train) == 100  # after rank 0, as the training loop orders it
    assert len(cifar10.load(cifar_spec(), rank=0).train) == 100  # present: no second download
    assert len(fake_download) == 1


def test_no_download_unless_asked(data_dir, fake_download, monkeypatch):
    monkeypatch.delenv(cifar10.DOWNLOAD_ENV)
    with pytest.raises(FileNotFoundError):
        cifar10.load(cifar_spec(), rank=0)
    assert fake_download == []


def test_a_failed_download_says_where_to_put_the_files(data_dir, monkeypatch):
    def offline(root, **_):
        raise OSError("network unreachable")

    monkeypatch.setattr("torchvision.datasets.CIFAR10", offline)
    monkeypatch.setenv(cifar10.DOWNLOAD_ENV, "1")
    with pytest.raises(RuntimeError, match="network unreachable") as caught:
        cifar10.load(cifar_spec(), rank=0)
    assert str(data_dir) in str(caught.value) and "cifar-10-python.tar.gz" in str(caught.value)


def test_a_batch_file_that_would_run_code_is_refused(data_dir):
    write_cifar10(data_dir)
    with (data_dir / "cifar-10-batches-py" / "test_batch").open("wb") as f:
        pickle.dump({b"data": os.getcwd, b"labels": []}, f)  # any callable a pickle names
    with pytest.raises(pickle.UnpicklingError, match="not part of a CIFAR-10 batch"):
        cifar10.load(cifar_spec(), rank=0)


def test_augment_crops_and_flips_each_image_of_a_batch():
    images = torch.randn(6, 3, 32, 32)
    torch.manual_seed(0)
    out = cifar10.augment(images)
    assert out.shape == images.shape and out.dtype == images.dtype
    assert not torch.equal(out, images)
    padded = torch.nn.functional.pad(images, [4] * 4)
    crops = [
        view
        for dy in range(9)
        for dx in range(9)
        for view in (padded[..., dy : dy + 32, dx : dx + 32], padded[..., dy : dy + 32, dx : dx + 32].flip(-1))
    ]
    for i in range(len(images)):
        assert any(torch.equal(out[i], crop[i]) for crop in crops), f"image {i} is no padded crop, flipped or not"
    torch.manual_seed(0)
    assert torch.equal(cifar10.augment(images), out)
