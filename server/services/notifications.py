"""Notifications, the queueing side: each user's events and channels (checked when set), and the messages queued
for them in the transaction of the event they tell of. Nothing here sends anything: the delivery loop
(server/services/delivery.py) does, beside the monitor, so that a slow mail host or receiver never holds a cycle."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence

from sqlalchemy.engine import Engine
from sqlmodel import Session, col, func, select

from contract.states import FINAL_STATES, FailureKind
from server.config import Settings
from server.errors import Invalid, NotAllowed, NotFound
from server.models import (
    Channel,
    Experiment,
    NotificationDeliveriesPublic,
    NotificationDelivery,
    NotificationDeliveryPublic,
    NotificationSettings,
    NotificationSettingsPublic,
    NotificationSettingsUpdate,
    NotifyEvent,
    RegressionWatch,
    Run,
    User,
    utcnow,
)
from server.models.notification import MAX_TEXT_CHARS
from server.services import references, webhook_rules
from server.services.failure_kinds import ADVICE
from server.services.webhook_rules import Refused, Resolver

# An address SMTP takes without quoting: no spaces, no control characters (no header can be smuggled in), no
# leading dash (sendmail would read an option), one @ and a dotted domain.
_EMAIL = re.compile(r"^[A-Za-z0-9.!#$%&'*+/=?^_`{|}~][A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]*@[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+$")
MAX_DELIVERIES_LISTED = 200
SUBJECT_CHARS = 200
# Watched experiments tested per monitor cycle: each test is a bootstrap of its points (about 20 ms).
WATCHED_PER_CYCLE = 10


def email_available(settings: Settings) -> bool:
    return bool(settings.smtp_host or settings.sendmail)


def public(row: NotificationSettings | None, settings: Settings) -> NotificationSettingsPublic:
    return NotificationSettingsPublic(
        events=row.events if row else [],
        email=row.email if row else None,
        webhook_url=row.webhook_url if row else None,
        email_available=email_available(settings),
        webhooks_available=bool(settings.webhook_allow),
    )


def settings_of(session: Session, user: User, settings: Settings) -> NotificationSettingsPublic:
    return public(session.get(NotificationSettings, user.name), settings)


def check(
    change: NotificationSettingsUpdate, settings: Settings, resolve: Resolver = webhook_rules.system_resolver
) -> None:
    """Refuse an address or URL the server could not or may not send to, naming the field and the rule."""
    problems: list[tuple[tuple[str | int, ...], str]] = []
    if change.email is not None:
        if not _EMAIL.match(change.email):
            problems.append((("body", "email"), "not an e-mail address (NAME@DOMAIN, without spaces)"))
        elif not email_available(settings):
            problems.append(
                (
                    ("body", "email"),
                    "this server sends no e-mail: the operator set neither SCALELAB_SMTP_HOST nor SCALELAB_SENDMAIL",
                )
            )
    if change.webhook_url is not None:
        try:
            webhook_rules.addresses(webhook_rules.parse(change.webhook_url, settings), settings, resolve)
        except Refused as exc:
            problems.append((("body", "webhook_url"), str(exc)))
    if problems:
        raise Invalid(problems)


def update(
    session: Session,
    user: User,
    change: NotificationSettingsUpdate,
    settings: Settings,
    resolve: Resolver = webhook_rules.system_resolver,
) -> NotificationSettingsPublic:
    check(change, settings, resolve)
    row = session.get(NotificationSettings, user.name) or NotificationSettings(user_name=user.name)
    row.events = [event for event in NotifyEvent if event in change.events and event is not NotifyEvent.test]
    row.email, row.webhook_url, row.updated_at = change.email, change.webhook_url, utcnow()
    session.add(row)
    session.commit()
    session.refresh(row)
    return public(row, settings)


def enqueue(
    session: Session,
    user_name: str | None,
    event: NotifyEvent,
    subject: str,
    text: str,
    *,
    experiment_id: str | None = None,
    run_id: str | None = None,
) -> list[NotificationDelivery]:
    """Stage one delivery per channel of the user's, if they chose the event (a test always goes); the caller
    commits, with the event itself."""
    row = session.get(NotificationSettings, user_name) if user_name else None
    if row is None or (event is not NotifyEvent.test and event not in row.events):
        return []
    targets = [(Channel.email, row.email), (Channel.webhook, row.webhook_url)]
    queued = [
        NotificationDelivery(
            user_name=row.user_name,
            event=event,
            channel=channel,
            target=target,
            subject=subject[:SUBJECT_CHARS],
            text=text[:MAX_TEXT_CHARS],
            experiment_id=experiment_id,
            run_id=run_id,
        )
        for channel, target in targets
        if target
    ]
    session.add_all(queued)
    return queued


def experiments_ended(session: Session, runs: Iterable[Run]) -> None:
    """For each experiment of these runs, just moved, whose runs have all ended now: one line of what became of
    them, to its owner. Called by the monitor before it commits the runs' new states."""
    experiment_ids = {run.experiment_id for run in runs if run.state in FINAL_STATES}
    if not experiment_ids:
        return
    session.flush()
    rows = session.exec(select(Run.experiment_id, Run.state).where(col(Run.experiment_id).in_(experiment_ids))).all()
    states: dict[str, Counter[str]] = {}
    for experiment_id, state in rows:
        states.setdefault(experiment_id, Counter())[state] += 1
    for experiment_id, counts in states.items():
        if any(state not in FINAL_STATES for state in counts):
            continue
        experiment = session.get(Experiment, experiment_id)
        if experiment is None:
            continue
        watch_regression(session, experiment)
        line = summary_line(experiment, counts)
        enqueue(
            session,
            experiment.owner,
            NotifyEvent.experiment_ended,
            line,
            line,
            experiment_id=experiment.id,
        )


def watch_regression(session: Session, experiment: Experiment) -> None:
    """Keep the ended experiment for the regression test, if its owner wants to hear of one."""
    wanted = session.get(NotificationSettings, experiment.owner) if experiment.owner else None
    if wanted is not None and NotifyEvent.regression in wanted.events:
        session.merge(RegressionWatch(experiment_id=experiment.id, user_name=wanted.user_name))


def check_regressions(engine: Engine) -> None:
    """Test each watched experiment whose runs are all read to their end against the reference pinned for its
    spec; tell its owner if it regressed. An experiment without a pinned reference, or that is it, is let go."""
    with Session(engine) as session:
        for watch in session.exec(select(RegressionWatch).limit(WATCHED_PER_CYCLE)).all():
            unread = session.exec(
                select(func.count())
                .select_from(Run)
                .where(Run.experiment_id == watch.experiment_id, Run.ingest_done == False)  # noqa: E712  (SQL)
            ).one()
            if unread:
                continue
            owner = session.get(User, watch.user_name)
            session.delete(watch)
            answer = None
            if owner is not None:
                try:
                    answer = references.regression_of(session, owner, watch.experiment_id)
                except (NotFound, NotAllowed):
                    answer = None  # no reference pinned for its spec (or the experiment is gone)
            if answer is not None and answer.verdict == "regressed" and answer.reference_id != watch.experiment_id:
                line = f"experiment {watch.experiment_id} regressed against reference {answer.reference_id}"
                text = f"{line}: {answer.summary}" + (" (hedged: see its regression page)" if answer.hedged else "")
                enqueue(session, watch.user_name, NotifyEvent.regression, line, text, experiment_id=watch.experiment_id)
            session.commit()


def summary_line(experiment: Experiment, counts: Counter[str]) -> str:
    """`experiment NAME (ID) ended: 3 completed, 1 failed` (completed first, then the others by count)."""
    completed = counts.get("completed", 0)
    others = sorted(((n, state) for state, n in counts.items() if state != "completed"), key=lambda x: (-x[0], x[1]))
    parts = [f"{completed} completed"] + [f"{n} {state}" for n, state in others]
    total = sum(counts.values())
    verdict = "completed" if completed == total else "ended"
    return f"experiment {experiment.name} ({experiment.id}) {verdict}: {', '.join(parts)} of {total} runs"


def run_failed(session: Session, run: Run) -> None:
    """A failed run's kind and the sentence of what to do, to its owner. Called where its kind is stored."""
    kind = run.failure_kind
    if kind is None:
        return
    line = f"run {run.id} of experiment {run.experiment_id} failed: {kind}"
    text = "\n".join(part for part in (line, run.failure_detail, ADVICE.get(FailureKind(kind))) if part)
    enqueue(session, run.owner, NotifyEvent.run_failed, line, text, experiment_id=run.experiment_id, run_id=run.id)


def run_hung(session: Session, run: Run, found: str) -> None:
    """A run judged hung (its ranks' stacks read), to its owner. Called where the verdict is stored."""
    line = f"run {run.id} of experiment {run.experiment_id} hung"
    text = "\n".join((line, found, ADVICE[FailureKind.hung]))
    enqueue(session, run.owner, NotifyEvent.run_failed, line, text, experiment_id=run.experiment_id, run_id=run.id)


def queue_test(session: Session, user: User) -> list[NotificationDeliveryPublic]:
    """A test message on each of the user's channels, sent by the delivery loop like any other."""
    line = f"scalelab: a test notification for {user.name}"
    queued = enqueue(session, user.name, NotifyEvent.test, line, f"{line}; your channel works.")
    session.commit()
    return [NotificationDeliveryPublic.model_validate(row, from_attributes=True) for row in queued]


def deliveries(session: Session, user: User, limit: int = 50) -> NotificationDeliveriesPublic:
    """The user's deliveries, newest first, each with its attempts."""
    mine = col(NotificationDelivery.user_name) == user.name
    rows: Sequence[NotificationDelivery] = session.exec(
        select(NotificationDelivery).where(mine).order_by(col(NotificationDelivery.id).desc()).limit(limit)
    ).all()
    count = session.exec(select(func.count()).select_from(NotificationDelivery).where(mine)).one()
    return NotificationDeliveriesPublic(
        data=[NotificationDeliveryPublic.model_validate(row, from_attributes=True) for row in rows], count=count
    )
