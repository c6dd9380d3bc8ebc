"""An import: logs of runs made outside scalelab, turned into an experiment with one run per file. Only the
request is its own; the experiment and runs it makes are the usual tables."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from contract.limits import MAX_IMPORT_CHARS, MAX_IMPORT_FILE_CHARS
from server.models.experiment import MAX_RUNS_PER_EXPERIMENT, ExperimentBase


class ImportFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        min_length=1,
        max_length=255,
        pattern=r"^[^/\x00-\x1f]+$",
        description="the log's file name, to name it in errors; never used as a path",
        examples=["run_4gpus.out"],
    )
    content: str = Field(max_length=MAX_IMPORT_FILE_CHARS, description="the log's text")


class ImportCreate(ExperimentBase):
    """Logs of runs made outside scalelab: one run per file, all imported or none."""

    model_config = ConfigDict(extra="forbid")  # type: ignore[assignment]

    files: list[ImportFile] = Field(min_length=1, max_length=MAX_RUNS_PER_EXPERIMENT)

    @field_validator("files")
    @classmethod
    def _files_fit(cls, files: list[ImportFile]) -> list[ImportFile]:
        seen: set[str] = set()
        for file in files:
            if file.name in seen:
                raise ValueError(f"two files are named {file.name!r}: each file names one run")
            seen.add(file.name)
        if sum(len(file.content) for file in files) > MAX_IMPORT_CHARS:
            raise ValueError(f"the files hold more than {MAX_IMPORT_CHARS // 2**20} MiB of text: import them in parts")
        return files
