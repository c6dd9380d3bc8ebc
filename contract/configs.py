"""Each model's hyperparameters and each data set's shape and size, written once, and a spec resolved into them.

The worker builds its models and data sets from these and the server's memory estimate counts from them, without
torch, so the two cannot drift apart. The same goes for the facts of a model's structure that both read: which
layers tensor parallelism splits and how, resnet's stages, the rules a tensor-parallel degree must meet. A value
lives here when the torch-free side needs it too; what only the worker reads (weight initialisation, augmentation,
how synthetic data is drawn) stays beside the code that reads it. What the server will count per model next
(FLOPs per sample, bytes communicated per strategy) belongs here too: the worker's model spec
(worker/models/spec.py) reaches it through its `config`.

A spec's `depth`, `width`, `heads` and `context` are None for "the model's default": `XConfig.of(spec)` (or
`resolve(spec)` for any model) is the only place that fills them in.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, NamedTuple

from contract.spec import Dataset, Model, RunSpec


class Splits(NamedTuple):
    """Samples in the training and the validation set."""

    train: int
    val: int


# Data sets: what each gives a model. The estimate counts the bytes of the data the worker keeps on every GPU.
CLASSES = 10  # every classification data set here has ten
IMAGE_SHAPE = (3, 32, 32)  # CIFAR-10's; the synthetic images take it too, so that the same models read both

# worker/datasets/synthetic.py: whatever shape the spec's model reads.
SYNTHETIC_FEATURES = 32  # vectors, for mlp
SYNTHETIC_VECTORS = Splits(8192, 2048)
SYNTHETIC_IMAGES = Splits(2048, 512)  # for cnn and resnet18
SYNTHETIC_VOCAB = 64  # token sequences, for gpt
SYNTHETIC_SEQUENCES = Splits(2048, 256)

# Facts of data the worker reads from elsewhere (measured there, not set): the estimate needs them without the
# data, and the tests hold them against the real data where it is at hand.
DIGITS_FEATURES = 64  # scikit-learn's 8x8 digits, flattened
DIGITS_SAMPLES = Splits(1797 - 359, 359)  # a fifth held out
CIFAR10_SAMPLES = Splits(50_000, 10_000)  # the official files
# worker/datasets/text.py: the characters of a fixed set of Python standard-library sources, cut to
# TEXT_MAX_CHARS. The vocabulary is what those sources hold on Python 3.11-3.13; a worker image whose sources
# differ changes gpt's count by 2 x width + 1 parameters per character.
TEXT_MAX_CHARS = 300_000  # enough to learn from, small enough to load in a blink
TEXT_TRAIN_FRACTION = 0.9
TEXT_VOCAB = 95


# How tensor parallelism splits a Linear layer's weight over the group: by output units (columns), or by input
# units (rows, each rank's partial outputs then summed by one all-reduce); None keeps it whole on every rank.
Split = Literal["column", "row"]


class LinearShape(NamedTuple):
    """A Linear layer as a model's torch-free description knows it: the worker's tensor-parallel plan reads its name
    and split, the memory estimate its sizes and split."""

    name: str  # its module path inside the part of the model that holds it
    n_in: int
    n_out: int
    split: Split | None = None


def paired_splits(linears: int) -> list[Split | None]:
    """A stack of Linear layers split in column/row pairs, one all-reduce per pair; an unpaired last layer whole."""
    pairs = linears // 2
    return [("column", "row")[i % 2] if i < 2 * pairs else None for i in range(linears)]


def why_width_does_not_split(width: int, tp: int, name: str = "mlp") -> str | None:
    """Why a column-split layer of `width` outputs cannot give each of `tp` ranks an equal share; None where it can."""
    if width % tp:
        return f"{name} width {width} does not split over {tp} tensor-parallel ranks"
    return None


def why_heads_do_not_split(heads: int, tp: int, name: str = "gpt") -> str | None:
    """Why tensor parallelism over `tp` ranks cannot give each rank whole attention heads; None where it can.
    `name` says whose model it is (a checkpoint's, for inference). The one statement of the rule: the worker's plan,
    the memory estimate and the submission's checks all ask it."""
    if heads % tp:
        return f"{name} has {heads} attention heads, which do not split over {tp} ranks"
    return None


def _set_in(spec: RunSpec, *names: str) -> dict[str, int]:
    """The spec's size fields that it sets; the ones left None take the model's default."""
    return {name: value for name in names if (value := getattr(spec, name)) is not None}


@dataclass(frozen=True)
class MlpConfig:
    """The training courses' MLP."""

    depth: int = 2  # hidden layers
    width: int = 256

    @classmethod
    def of(cls, spec: RunSpec) -> MlpConfig:
        return cls(**_set_in(spec, "depth", "width"))


@dataclass(frozen=True)
class CnnConfig:
    """The training courses' CIFAR-10 CNN; no spec field sizes it."""

    input_shape: tuple[int, int, int] = IMAGE_SHAPE
    channels: tuple[int, ...] = (32, 64, 128)  # one stage each; every stage halves the image
    hidden: int = 256

    @classmethod
    def of(cls, spec: RunSpec) -> CnnConfig:
        return cls()


@dataclass(frozen=True)
class Resnet18Config:
    """torchvision's ResNet-18 with the CIFAR stem; the rest of its shape is torchvision's, not ours to set."""

    input_shape: tuple[int, int, int] = IMAGE_SHAPE
    stem: int = 64  # channels out of the first convolution: what torchvision's first residual stage expects
    # torchvision's residual stages, (channels, blocks) each; the worker shards and checkpoints stage by stage.
    stages: tuple[tuple[int, int], ...] = ((64, 2), (128, 2), (256, 2), (512, 2))
    features: int = 512  # what the pooled last stage gives the classifier

    @classmethod
    def of(cls, spec: RunSpec) -> Resnet18Config:
        return cls()


@dataclass(frozen=True)
class GptConfig:
    """The small decoder-only transformer; its vocabulary is the data set's, so it is not part of the model's."""

    depth: int = 4  # blocks
    width: int = 128  # embedding size
    heads: int = 4
    context: int = 64  # tokens per sequence
    mlp_ratio: int = 4  # the feed-forward layer's hidden units per embedding unit

    @classmethod
    def of(cls, spec: RunSpec) -> GptConfig:
        return cls(**_set_in(spec, "depth", "width", "heads", "context"))

    @property
    def head_dim(self) -> int:
        return self.width // self.heads

    def why_heads_do_not_split(self, tp: int, name: str = "gpt") -> str | None:
        return why_heads_do_not_split(self.heads, tp, name)

    def block_linears(self) -> tuple[LinearShape, ...]:
        """One block's Linear layers, named as worker/models/gpt.py names them: tensor parallelism splits q, k, v
        and the feed-forward's first layer by columns (whole heads and hidden units per rank) and the two
        projections back by rows. Embeddings, norms and the head stay whole."""
        width, hidden = self.width, self.mlp_ratio * self.width
        return (
            LinearShape("attn.q", width, width, "column"),
            LinearShape("attn.k", width, width, "column"),
            LinearShape("attn.v", width, width, "column"),
            LinearShape("attn.proj", width, width, "row"),
            LinearShape("mlp.fc", width, hidden, "column"),
            LinearShape("mlp.proj", hidden, width, "row"),
        )


class DataShape(NamedTuple):
    """What one sample of a data set gives a model: its shape, and the classes (or the vocabulary) it predicts."""

    sample_shape: tuple[int, ...]
    classes: int


def data_shape(spec: RunSpec) -> DataShape:
    """The shape of the samples the spec's model reads and the classes it predicts, as worker/datasets/ loads them:
    what both the memory estimate and the FLOP count (contract/flops.py) size a model's first and last layers by."""
    if spec.dataset is Dataset.text:
        return DataShape((GptConfig.of(spec).context,), TEXT_VOCAB)
    if spec.dataset is Dataset.digits:
        return DataShape((DIGITS_FEATURES,), CLASSES)
    if spec.dataset is Dataset.cifar10:
        return DataShape(IMAGE_SHAPE, CLASSES)
    # synthetic: whatever shape the model reads
    if spec.model is Model.gpt:
        return DataShape((GptConfig.of(spec).context,), SYNTHETIC_VOCAB)
    if spec.model is Model.mlp:
        return DataShape((SYNTHETIC_FEATURES,), CLASSES)
    return DataShape(IMAGE_SHAPE, CLASSES)


ModelConfig = MlpConfig | CnnConfig | Resnet18Config | GptConfig

CONFIGS: dict[Model, type[MlpConfig] | type[CnnConfig] | type[Resnet18Config] | type[GptConfig]] = {
    Model.mlp: MlpConfig,
    Model.cnn: CnnConfig,
    Model.resnet18: Resnet18Config,
    Model.gpt: GptConfig,
}


def resolve(spec: RunSpec) -> ModelConfig:
    """The configuration of the spec's model: its defaults, with the sizes the spec sets instead.

    Code that knows the model asks its class (`GptConfig.of(spec)`) and gets that type back."""
    return CONFIGS[spec.model].of(spec)
