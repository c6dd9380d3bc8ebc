"""Who may see an experiment, and so its runs, their output, metrics, events, generations, comparisons and reports:
the one rule every read goes through, in Python for one experiment and in SQL for lists.

An experiment is seen by its owner and by admins (with authentication off everyone acts as the admin `local`), by
everyone signed in if its owner shared it with everyone, and by the members of a Unix group if shared with that
group. Seeing is reading: changing stays the owner's or an admin's (server.runstate.may_change). What a user may
not see answers exactly as what does not exist (404 / NotFound), so that its existence is not confirmed either.
"""

from __future__ import annotations

from typing import Any, TypeVar

from sqlalchemy import Select, and_, false, or_, true
from sqlalchemy.sql.elements import ColumnElement
from sqlmodel import Session, col, select
from sqlmodel.sql.expression import SelectOfScalar

from server.errors import Invalid, NotFound
from server.models import Experiment, Run, SharingChange, User
from server.runstate import require_owner
from server.services import unix_accounts

PRIVATE, GROUP, EVERYONE = "private", "group", "everyone"


def groups_of(user: User) -> frozenset[str]:
    """The Unix groups a user is in, as sharing counts them: only Unix users have any."""
    if not user.unix:
        return frozenset()
    return unix_accounts.groups_of(user.name) or frozenset()


def may_see(user: User, experiment: Experiment) -> bool:
    if user.is_admin or (experiment.owner is not None and experiment.owner == user.name):
        return True
    if experiment.sharing == EVERYONE:
        return True
    return experiment.sharing == GROUP and experiment.sharing_group in groups_of(user)


def visible(user: User) -> ColumnElement[bool]:
    """The same rule as a condition on Experiment's columns, for lists filtered in SQL."""
    if user.is_admin:
        return true()
    groups = sorted(groups_of(user))
    return or_(
        col(Experiment.owner) == user.name,
        col(Experiment.sharing) == EVERYONE,
        and_(col(Experiment.sharing) == GROUP, col(Experiment.sharing_group).in_(groups)) if groups else false(),
    )


def visible_experiment_ids(user: User) -> SelectOfScalar[str]:
    """The ids of the experiments the user may see, as a subquery (runs are seen through their experiment)."""
    return select(Experiment.id).where(visible(user))


Query = TypeVar("Query", bound=Select[*tuple[Any, ...]])


def only_visible(query: Query, user: User, experiment_id_column: Any) -> Query:
    """`query` narrowed to rows whose experiment (`experiment_id_column`) the user may see."""
    if user.is_admin:
        return query
    return query.where(col(experiment_id_column).in_(visible_experiment_ids(user)))


def visible_experiment(session: Session, user: User, experiment_id: str) -> Experiment:
    """The experiment, if the user may see it; NotFound, as for one that does not exist, otherwise."""
    experiment = session.get(Experiment, experiment_id)
    if experiment is None or not may_see(user, experiment):
        raise NotFound(f"no experiment {experiment_id!r}")
    return experiment


def visible_run(session: Session, user: User, run_id: str) -> Run:
    """The run, if the user may see its experiment; NotFound, as for one that does not exist, otherwise."""
    run = session.get(Run, run_id)
    if run is None or not may_see_run(session, user, run):
        raise NotFound(f"no run {run_id!r}")
    return run


def may_see_run(session: Session, user: User, run: Run) -> bool:
    if user.is_admin:
        return True
    experiment = session.get(Experiment, run.experiment_id)
    return experiment is not None and may_see(user, experiment)


def share(session: Session, user: User, experiment_id: str, change: SharingChange) -> Experiment:
    """Set who may see the experiment. Only its owner or an admin may (NotAllowed otherwise; NotFound for one the
    user cannot see at all). A group must exist and, unless an admin shares, hold the one who shares: nobody can
    show their experiment to a group they are not part of."""
    experiment = visible_experiment(session, user, experiment_id)
    require_owner(user, experiment.owner, f"experiment {experiment_id}")
    field = ("body", "group")
    if change.with_ == GROUP:
        if change.group is None:
            raise Invalid([(field, "name the Unix group to share with")])
        if not unix_accounts.group_exists(change.group):
            raise Invalid([(field, f"there is no Unix group {change.group!r} on this machine")])
        if not user.is_admin and change.group not in groups_of(user):
            raise Invalid([(field, f"you are not a member of the Unix group {change.group!r}")])
    elif change.group is not None:
        raise Invalid([(field, f"a group goes only with `with: group`, not with `with: {change.with_}`")])
    experiment.sharing, experiment.sharing_group = change.with_, change.group
    session.add(experiment)
    session.commit()
    session.refresh(experiment)
    return experiment


def who_sees(experiment: Experiment) -> str:
    """In words, for the pages and the command line."""
    owner = experiment.owner or "an admin"
    if experiment.sharing == EVERYONE:
        return "everyone signed in (read-only)"
    if experiment.sharing == GROUP:
        return f"{owner}, the admins, and the members of the Unix group {experiment.sharing_group} (read-only)"
    return f"{owner} and the admins only"
