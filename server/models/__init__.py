"""Database tables and the API's request and response models, one module per entity, each with its family
(`XBase`, `X(table=True)`, `XCreate`, `XPublic`, `XsPublic`).

Importing the package imports every module, so that SQLModel.metadata holds every table for the engine, Alembic
and deletion's schema scan; and it re-exports every public name, so that `from server.models import X` serves
whichever module X lives in. The modules import nothing from the services, routers, pages or monitor: tables and
schemas depend on no domain code.
"""

from server.models.accounting import GATHERABLE, AccountingPublic, RunAccounting, RunAccountingBase
from server.models.common import new_id, showable, utcnow
from server.models.compare import (
    TIME_PARTS,
    AmdahlFitPublic,
    ComparePublic,
    CompareRow,
    EpochPoint,
    Flag,
    FlagCode,
    PredictedPoint,
    RunResources,
    ScalingFits,
    ScalingMode,
    ScalingPoint,
    ScalingPublic,
    ScalingSeries,
    UslFitPublic,
)
from server.models.event import RunEvent, RunEventBase, RunEventKind, RunEventsPublic
from server.models.experiment import (
    MAX_REPEATS,
    MAX_RUNS,
    MAX_VALUES,
    Experiment,
    ExperimentBase,
    ExperimentChanges,
    ExperimentCreate,
    ExperimentCreated,
    ExperimentPublic,
    ExperimentsPublic,
    Isolation,
    OptionValue,
    Resources,
    SkippedRun,
    SpecBase,
    SpecGrid,
)
from server.models.imports import ImportCreate, ImportFile
from server.models.inference import (
    MAX_PROMPT_CHARS,
    MAX_PROMPTS,
    MAX_PROMPTS_CHARS,
    Generation,
    GenerationsPublic,
    InferenceInput,
    InferencePublic,
    InferenceRow,
)
from server.models.metric import Metric, MetricsPublic, RunSummary
from server.models.preview import ExperimentPreview, MemoryEstimate, RunEstimate
from server.models.profile import ProfilesPublic
from server.models.run import (
    Run,
    RunBase,
    RunLog,
    RunPublic,
    RunsPublic,
)
from server.models.user import LOCAL_USER, USER_NAME, ApiToken, User, UserBase, UserPublic, WebSession

__all__ = [
    "GATHERABLE",
    "LOCAL_USER",
    "MAX_PROMPTS",
    "MAX_PROMPTS_CHARS",
    "MAX_PROMPT_CHARS",
    "MAX_REPEATS",
    "MAX_RUNS",
    "MAX_VALUES",
    "TIME_PARTS",
    "USER_NAME",
    "AccountingPublic",
    "AmdahlFitPublic",
    "ApiToken",
    "ComparePublic",
    "CompareRow",
    "EpochPoint",
    "Experiment",
    "ExperimentBase",
    "ExperimentChanges",
    "ExperimentCreate",
    "ExperimentCreated",
    "ExperimentPreview",
    "ExperimentPublic",
    "ExperimentsPublic",
    "Flag",
    "FlagCode",
    "Generation",
    "GenerationsPublic",
    "ImportCreate",
    "ImportFile",
    "InferenceInput",
    "InferencePublic",
    "InferenceRow",
    "Isolation",
    "MemoryEstimate",
    "Metric",
    "MetricsPublic",
    "OptionValue",
    "PredictedPoint",
    "ProfilesPublic",
    "Resources",
    "Run",
    "RunAccounting",
    "RunAccountingBase",
    "RunBase",
    "RunEstimate",
    "RunEvent",
    "RunEventBase",
    "RunEventKind",
    "RunEventsPublic",
    "RunLog",
    "RunPublic",
    "RunResources",
    "RunSummary",
    "RunsPublic",
    "ScalingFits",
    "ScalingMode",
    "ScalingPoint",
    "ScalingPublic",
    "ScalingSeries",
    "SkippedRun",
    "SpecBase",
    "SpecGrid",
    "User",
    "UserBase",
    "UserPublic",
    "UslFitPublic",
    "WebSession",
    "new_id",
    "showable",
    "utcnow",
]
