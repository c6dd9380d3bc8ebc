"""An inference experiment: what it generates from (a checkpoint and the prompts, the `inference` section of an
experiment's request) and what it gives back (each prompt's generation, and each run's figures to compare)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from contract.spec import Strategy
from contract.states import RunState

MAX_PROMPTS = 256
MAX_PROMPTS_CHARS = 64 * 1024
MAX_PROMPT_CHARS = 4096


class InferenceInput(BaseModel):
    """What an inference experiment generates from: a trained checkpoint, and the prompts."""

    model_config = ConfigDict(extra="forbid")

    checkpoint_run: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{1,16}$",
        description="the id of a completed gpt training run of scalelab (trained on text, with a checkpoint)",
    )
    checkpoint_path: str | None = Field(
        default=None,
        max_length=1024,
        pattern=r"^/[A-Za-z0-9_./+-]*$",
        description="or: the directory of such a run, under one of the cluster profile's checkpoint_roots",
    )
    prompts: str = Field(
        default="",
        max_length=MAX_PROMPTS_CHARS,
        description=f"the prompts file's text: one prompt per line (blank lines are skipped), "
        f"at most {MAX_PROMPTS} prompts of {MAX_PROMPT_CHARS} characters",
    )

    @field_validator("prompts")
    @classmethod
    def _prompts_fit(cls, prompts: str) -> str:
        lines = [line for line in prompts.splitlines() if line.strip()]
        if len(lines) > MAX_PROMPTS:
            raise ValueError(f"the prompts file holds {len(lines)} prompts; at most {MAX_PROMPTS} fit one experiment")
        for number, line in enumerate(lines, start=1):
            if len(line) > MAX_PROMPT_CHARS:
                raise ValueError(f"prompt {number} is longer than {MAX_PROMPT_CHARS} characters")
            if "\x00" in line:
                raise ValueError(f"prompt {number} holds a NUL character")
        return prompts

    def prompt_lines(self) -> str:
        """The prompts file as the worker reads it: one prompt per line."""
        return "".join(line + "\n" for line in self.prompts.splitlines() if line.strip())


class Generation(BaseModel):
    """One prompt and the text an inference run generated after it."""

    index: int = Field(description="the prompt's place among the prompts, from 0")
    prompt: str
    completion: str
    prompt_tokens: int = Field(description="tokens of the prompt the model saw (it keeps the last ones that fit)")
    new_tokens: int


class GenerationsPublic(BaseModel):
    run_id: str
    data: list[Generation]
    count: int
    complete: bool = Field(description="the run wrote its generations (they appear all at once, when it is done)")


class InferenceRow(BaseModel):
    """One inference run's figures, for comparing layouts and compile on/off."""

    run_id: str
    state: RunState
    strategy: Strategy
    tp: int
    compile: bool
    precision: str
    batch_size: int
    tokens_per_s: float | None = Field(description="aggregate over all prompts")
    request_tokens_per_s: float | None = Field(description="mean over the prompts")
    ttft_s: float | None = Field(description="mean time to first token")
    latency_p50_s: float | None = Field(description="per-token latency, median")
    latency_p95_s: float | None
    load_time_s: float | None
    compile_time_s: float | None
    peak_memory_bytes: int | None = Field(description="the largest over the ranks")
    memory_per_rank: list[int] = Field(description="each rank's peak memory in bytes, by rank")
    memory_kind: str | None
    ingest_done: bool = Field(description="the run has ended and all its output has been read: its figures are final")


class InferencePublic(BaseModel):
    experiment_id: str
    data: list[InferenceRow]
    count: int
