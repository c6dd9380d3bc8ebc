"""A client of scalelab's REST API: one method per endpoint, and errors a caller can tell apart."""

from __future__ import annotations

import base64
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Self, TypeVar
from urllib.parse import quote

import httpx

from client.schemas import (
    CardVerdictView,
    CompareView,
    CreatedView,
    DeliveriesView,
    DeliveryView,
    EpochsView,
    EventsView,
    ExperimentsView,
    ExperimentView,
    FabricView,
    FailuresView,
    HistoryView,
    LogView,
    NotifySettingsView,
    PlanView,
    PreviewView,
    ProfilesView,
    ProfileView,
    ReferenceView,
    RegressionView,
    RerunPreviewView,
    RunsView,
    RunView,
    ScalingView,
    TokenView,
    View,
)
from contract.errors import PROGRAMS_ADMIN_ONLY, UNRUNNABLE, ErrorBody

DEFAULT_URL = "http://127.0.0.1:8000"
DEFAULT_TIMEOUT_S = 60.0

Model = TypeVar("Model", bound=View)


class ClientError(Exception):
    """Anything that kept a request from succeeding; the message is for the user."""


class BadUrl(ClientError):
    """The server's URL is not one a request can go to."""


class ServerUnreachable(ClientError):
    """No answer from the server: it is down, or the URL points elsewhere."""


class ApiError(ClientError):
    """The server answered with an error status; `body` is its error answer, where it sent one."""

    def __init__(self, status_code: int, message: str, body: ErrorBody | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.body = body

    @property
    def experiment_id(self) -> str | None:
        """The experiment the server kept although the request failed (a 503 of a submission)."""
        return self.body.experiment_id if self.body is not None else None

    def locations(self) -> list[tuple[str | int, ...]]:
        """Where each problem of a 422 is, as the server places it: ("body", "grid"), ("query", "index")..."""
        return [tuple(problem.get("loc") or ()) for problem in self._problems()]

    def names_unrunnable(self) -> bool:
        """Whether the 422 names grid combinations that cannot run: what on_invalid "skip" leaves out."""
        return any(problem.get("type") == UNRUNNABLE for problem in self._problems())

    def _problems(self) -> list[dict[str, Any]]:
        if self.body is None or isinstance(self.body.detail, str):
            return []
        return self.body.detail

    def with_hint(self, hint: str) -> Self:
        """The same error, with a line after the server's words on what the command line offers for it."""
        return type(self)(self.status_code, f"{self}\n{hint}", self.body)


class TokenRejected(ApiError):
    """401 or 403: the token is missing, wrong, or not allowed to do this."""


class NotFound(ApiError):
    """404: no such experiment or run."""


class Invalid(ApiError):
    """422 (or 400): the request names what is wrong with it."""


class Conflict(ApiError):
    """409: the request does not fit what it acts on, say cancelling a run that has ended."""


class Unavailable(ApiError):
    """503: the server is up but cannot reach the scheduler (Slurm) now; asking again later may succeed."""


def _body(response: httpx.Response) -> ErrorBody | None:
    """The error answer as the API shapes it; None from something else (a proxy's page, a crash)."""
    try:
        return ErrorBody.model_validate(response.json())
    except ValueError:  # not JSON, or (pydantic's ValidationError is one) not shaped as an error answer
        return None


def _detail(body: ErrorBody | None, response: httpx.Response) -> str:
    """The server's own words: its `detail`, as one line per problem for validation errors."""
    if body is None:
        return response.text.strip()[:500] or response.reason_phrase
    if isinstance(body.detail, str):
        return body.detail
    lines = []
    for problem in body.detail:
        where = ".".join(str(part) for part in problem.get("loc") or () if part != "body")
        lines.append(f"{where}: {problem.get('msg')}" if where else str(problem.get("msg")))
    return "\n".join(lines)


def _error(response: httpx.Response, url: str) -> ApiError:
    body = _body(response)
    detail = _detail(body, response)
    status = response.status_code
    if status == 403 and body is not None and body.reason == PROGRAMS_ADMIN_ONLY:
        # Not the token: this user may not run programs on this server, which the server's words explain.
        return ApiError(status, detail, body)
    if status in (401, 403):
        return TokenRejected(
            status,
            f"the server at {url} rejected the token (HTTP {status}: {detail}); "
            "check --token, SCALELAB_TOKEN or the token in the config file",
            body,
        )
    if status == 404:
        return NotFound(status, detail, body)
    if status in (400, 422):
        return Invalid(status, detail, body)
    if status == 409:
        return Conflict(status, detail, body)
    if status == 503:
        retry = response.headers.get("Retry-After", "")
        later = f"try again in {retry} s" if retry.isdigit() else "try again later"
        return Unavailable(status, f"{detail} (HTTP 503: {later})", body)
    return ApiError(status, f"HTTP {status}: {detail}", body)


class Client:
    """Talks to one server; use as a context manager, or call close()."""

    def __init__(
        self,
        url: str = DEFAULT_URL,
        token: str | None = None,
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        http: httpx.Client | None = None,
    ) -> None:
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        # `http` lets tests talk to the app in-process; it brings its own base URL, and its owner closes it.
        self._own_http = http is None
        try:
            self._http = http or httpx.Client(base_url=self.url, timeout=timeout_s)
        except httpx.InvalidURL as exc:
            raise BadUrl(f"{url!r} is not a valid server URL: {exc}") from None

    def __enter__(self) -> Client:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._own_http:
            self._http.close()

    def _request(
        self,
        method: str,
        path: str,
        *,
        json: Any = None,
        params: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        try:
            response = self._http.request(method, path, json=json, params=params, headers=headers or self._headers)
        except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
            raise BadUrl(f"{self.url!r} is not a valid server URL: {exc}") from None
        except httpx.ConnectError as exc:
            raise ServerUnreachable(
                f"cannot reach the scalelab server at {self.url} ({exc}); is it running? "
                "Start it with scripts/up, or give its URL with --url, SCALELAB_URL or the config file"
            ) from None
        except httpx.TimeoutException:
            waited = f"{self.timeout_s:g} s"
            raise ServerUnreachable(f"the scalelab server at {self.url} did not answer within {waited}") from None
        except httpx.TransportError as exc:
            raise ServerUnreachable(f"no HTTP answer from {self.url} ({exc}); is that a scalelab server?") from None
        if response.is_error:
            raise _error(response, self.url)
        return response

    def _json(self, response: httpx.Response, what: str) -> Any:
        try:
            return response.json()
        except ValueError:
            raise self._not_scalelab(response, what) from None

    def _not_scalelab(self, response: httpx.Response, what: str) -> ClientError:
        return ClientError(
            f"the server at {self.url} answered {response.request.url.path} with something other than "
            f"scalelab's {what}; is the URL right, and is the server this client's version?"
        )

    def _parse(self, model: type[Model], response: httpx.Response) -> Model:
        try:
            return model.model_validate(self._json(response, model.__name__))
        except ValueError:  # not the shape this client knows
            raise self._not_scalelab(response, model.__name__) from None

    def _get(self, model: type[Model], path: str, **params: Any) -> Model:
        return self._parse(model, self._request("GET", path, params=params))

    def _post(self, model: type[Model], path: str, json: Any = None, **params: Any) -> Model:
        return self._parse(model, self._request("POST", path, json=json, params=params or None))

    def _get_json(self, path: str) -> Any:
        """An answer as the server sent it, every field kept: for output that promises the API's JSON."""
        return self._json(self._request("GET", path), "JSON")

    # ---- tokens --------------------------------------------------------------------------------------------------

    def create_token(self, name: str, password: str, lifetime_days: float | None = None) -> TokenView:
        """A new API token of the user, signing in with their name and password (HTTP Basic); it ends after
        `lifetime_days` (None: when revoked)."""
        credentials = base64.b64encode(f"{name}:{password}".encode()).decode()
        response = self._request(
            "POST",
            "/api/tokens",
            headers={"Authorization": f"Basic {credentials}"},
            json={"lifetime_days": lifetime_days},
        )
        return self._parse(TokenView, response)

    # ---- experiments ---------------------------------------------------------------------------------------------

    def submit(self, request: dict[str, Any]) -> CreatedView:
        return self._post(CreatedView, "/api/experiments", request)

    def preview(self, request: dict[str, Any], *, index: int = 0) -> PreviewView:
        """The runs the request expands into, and the batch script of run `index`."""
        return self._post(PreviewView, "/api/experiments/preview", request, index=index)

    def experiments(self, *, skip: int = 0, limit: int = 100) -> ExperimentsView:
        return self._get(ExperimentsView, "/api/experiments", skip=skip, limit=limit)

    def experiment(self, experiment_id: str) -> ExperimentView:
        return self._get(ExperimentView, f"/api/experiments/{_segment(experiment_id)}")

    def compare(self, experiment_id: str) -> CompareView:
        return self._get(CompareView, _compare_path(experiment_id))

    def compare_json(self, experiment_id: str) -> Any:
        """The comparison as the server sent it, fields this client does not know included."""
        return self._get_json(_compare_path(experiment_id))

    def compare_csv(self, experiment_id: str) -> str:
        return self._request("GET", f"/api/experiments/{_segment(experiment_id)}/compare.csv").text

    def scaling(self, experiment_id: str) -> ScalingView:
        return self._get(ScalingView, f"/api/experiments/{_segment(experiment_id)}/scaling")

    def scaling_json(self, experiment_id: str) -> Any:
        """The scaling analysis as the server sent it, fits and predicted curves included."""
        return self._get_json(f"/api/experiments/{_segment(experiment_id)}/scaling")

    def failures(self, experiment_id: str) -> FailuresView:
        return self._get(FailuresView, f"/api/experiments/{experiment_id}/failures")

    def report_html(self, experiment_id: str, against: str | None = None) -> str:
        """The experiment's report: one HTML file that needs neither the server nor a network to read; against the
        reference pinned for its spec, or against the experiment `against`."""
        params = {"against": against} if against else None
        response = self._request("GET", f"/api/experiments/{_segment(experiment_id)}/report.html", params=params)
        if not response.headers.get("content-type", "").startswith("text/html"):
            raise self._not_scalelab(response, "report")
        return response.text

    def share(self, experiment_id: str, whom: str, group: str | None = None) -> ExperimentView:
        """Who may see the experiment besides its owner and the admins: private, group (with `group`), everyone."""
        body = {"with": whom, **({"group": group} if group is not None else {})}
        path = f"/api/experiments/{_segment(experiment_id)}/sharing"
        return self._parse(ExperimentView, self._request("PUT", path, json=body))

    # ---- pinned references and regressions ------------------------------------------------------------------------

    def pin(self, experiment_id: str, role: str = "reference") -> ReferenceView:
        """Pin the experiment as its spec's reference (role reference), or mark it an A/A run of it (role aa)."""
        path = f"/api/experiments/{_segment(experiment_id)}/{'aa' if role == 'aa' else 'reference'}"
        return self._parse(ReferenceView, self._request("PUT", path))

    def unpin(self, experiment_id: str) -> None:
        self._request("DELETE", f"/api/experiments/{_segment(experiment_id)}/reference")

    def regression(self, experiment_id: str, against: str | None = None) -> RegressionView:
        params = {"against": against} if against else {}
        return self._get(RegressionView, f"/api/experiments/{_segment(experiment_id)}/regression", **params)

    def reference_history(self, experiment_id: str) -> HistoryView:
        return self._get(HistoryView, f"/api/references/{_segment(experiment_id)}/history")

    # ---- notifications -------------------------------------------------------------------------------------------

    def notify_settings(self) -> NotifySettingsView:
        return self._get(NotifySettingsView, "/api/notifications/settings")

    def set_notify(self, events: list[str], email: str | None, webhook_url: str | None) -> NotifySettingsView:
        """Replace the settings whole: the events, and each channel (None: not used)."""
        body = {"events": events, "email": email, "webhook_url": webhook_url}
        return self._parse(NotifySettingsView, self._request("PUT", "/api/notifications/settings", json=body))

    def notify_test(self) -> list[DeliveryView]:
        answer = self._json(self._request("POST", "/api/notifications/test"), "deliveries")
        try:
            return [DeliveryView.model_validate(row) for row in answer]
        except (TypeError, ValueError):
            raise ClientError("the server's answer to the test notification is not a list of deliveries") from None

    def deliveries(self, limit: int = 20) -> DeliveriesView:
        return self._get(DeliveriesView, "/api/notifications/deliveries", limit=limit)

    def cancel_experiment(self, experiment_id: str) -> RunsView:
        return self._post(RunsView, f"/api/experiments/{_segment(experiment_id)}/cancel")

    def resubmit_experiment(self, experiment_id: str) -> RunsView:
        return self._post(RunsView, f"/api/experiments/{_segment(experiment_id)}/resubmit")

    def clone(self, experiment_id: str, changes: dict[str, Any]) -> CreatedView:
        """`changes` as the API's ExperimentChanges: name, base, grid, resources, on_invalid."""
        return self._post(CreatedView, f"/api/experiments/{_segment(experiment_id)}/clone", changes)

    def rerun_failed(self, experiment_id: str, body: dict[str, Any]) -> RunsView:
        """`body` as the API's FailedRerun: failed, kinds, run_ids, set. The new runs, each naming its original."""
        return self._post(RunsView, f"/api/experiments/{_segment(experiment_id)}/rerun", body)

    def preview_reruns(self, experiment_id: str, body: dict[str, Any]) -> RerunPreviewView:
        """What rerun_failed would submit, submitting nothing."""
        return self._post(RerunPreviewView, f"/api/experiments/{_segment(experiment_id)}/rerun/preview", body)

    def import_logs(self, name: str, files: Sequence[tuple[str, str]]) -> CreatedView:
        """Files as (name, content) pairs."""
        body = {"name": name, "files": [{"name": file, "content": content} for file, content in files]}
        return self._post(CreatedView, "/api/imports", body)

    def card_text(self, experiment_id: str) -> str:
        """The experiment's scaling card, as the server wrote it (kept byte for byte: its hash is over its content)."""
        response = self._request("GET", f"/api/experiments/{_segment(experiment_id)}/card")
        if not response.headers.get("content-type", "").startswith("application/json"):
            raise self._not_scalelab(response, "scaling card")
        return response.text

    def verify_card(self, card: dict[str, Any]) -> CardVerdictView:
        """The server's verdict on a card: every figure recomputed from its records, each difference named."""
        return self._post(CardVerdictView, "/api/cards/verify", card)

    def import_card(self, card: dict[str, Any]) -> CreatedView:
        """The card, verified, as a new read-only experiment."""
        return self._post(CreatedView, "/api/cards", card)

    # ---- runs ----------------------------------------------------------------------------------------------------

    def runs(
        self,
        *,
        experiment_id: str | None = None,
        states: Sequence[str] = (),
        skip: int = 0,
        limit: int = 1000,
    ) -> RunsView:
        params: dict[str, Any] = {"skip": skip, "limit": limit}
        if experiment_id is not None:
            params["experiment_id"] = experiment_id
        if states:
            params["state"] = list(states)
        return self._get(RunsView, "/api/runs", **params)

    def run(self, run_id: str) -> RunView:
        return self._get(RunView, f"/api/runs/{_segment(run_id)}")

    def epochs(self, run_id: str, *, skip: int = 0, limit: int = 10_000) -> EpochsView:
        """The run's epoch records, oldest first."""
        return self._get(EpochsView, f"/api/runs/{_segment(run_id)}/metrics", kind="epoch", skip=skip, limit=limit)

    def log(self, run_id: str, offset: int = 0) -> LogView:
        return self._get(LogView, f"/api/runs/{_segment(run_id)}/log", offset=offset)

    def cancel_run(self, run_id: str) -> RunView:
        return self._post(RunView, f"/api/runs/{_segment(run_id)}/cancel")

    def resubmit_run(self, run_id: str) -> RunView:
        return self._post(RunView, f"/api/runs/{_segment(run_id)}/resubmit")

    def events(self, run_id: str) -> EventsView:
        return self._get(EventsView, f"/api/runs/{_segment(run_id)}/events")

    # ---- cluster profiles ----------------------------------------------------------------------------------------

    def profiles(self) -> ProfilesView:
        return self._get(ProfilesView, "/api/profiles")

    def profiles_json(self) -> Any:
        """The profiles as the server sent them, fields this client does not know included."""
        return self._get_json("/api/profiles")

    def create_plan(self, request: dict[str, Any], options: dict[str, Any]) -> PlanView:
        return self._post(PlanView, "/api/plans", request, **options)

    def plan(self, plan_id: str) -> PlanView:
        return self._get(PlanView, f"/api/plans/{_segment(plan_id)}")

    def plan_experiment(self, plan_id: str) -> CreatedView:
        return self._post(CreatedView, f"/api/plans/{_segment(plan_id)}/experiment")

    def fabric(self, filters: dict[str, str]) -> FabricView:
        return self._get(FabricView, "/api/fabric", **filters)

    def fabric_json(self, filters: dict[str, str]) -> Any:
        """The probes as the server sent them, fields this client does not know included."""
        return self._json(self._request("GET", "/api/fabric", params=filters), "JSON")

    def profile(self, name: str) -> ProfileView:
        return self._get(ProfileView, _profile_path(name))

    def profile_json(self, name: str) -> Any:
        """One profile as the server sent it, fields this client does not know included."""
        return self._get_json(_profile_path(name))


def _compare_path(experiment_id: str) -> str:
    return f"/api/experiments/{_segment(experiment_id)}/compare"


def _profile_path(name: str) -> str:
    return f"/api/profiles/{_segment(name)}"


def _segment(value: str) -> str:
    """An id as one path segment: whatever a user typed cannot reach another endpoint."""
    quoted = quote(value, safe="")
    # Dot segments are percent-encoded too, or URL normalisation would climb a level.
    return quoted.replace(".", "%2E") if set(value) <= {"."} else quoted
