"""Pinned references through the API: pin, mark A/A, compare a later experiment point by point, the noise floor of a
profile, a reference's history, and an overlay of two chosen experiments; on both databases."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from sqlmodel import Session

from contract.records import WorkerRecord
from server.models import Experiment, Run
from tests.factories import epoch, experiment_row, printed_run, start

REQUEST: dict[str, Any] = {"base": {"model": "mlp", "epochs": 5}, "grid": {"gpus": [1, 2]}, "repeats": 3}
# Each run: a slower warm-up epoch, then four timed epochs (enough to time by, none under a second).
TIMED = 4


def measured(
    session: Session,
    tmp_path: Path,
    name: str,
    seconds: dict[int, list[float]],
    *,
    request: dict[str, Any] | None = None,
    digest: str | None = None,
    timed: int = TIMED,
) -> Experiment:
    """An experiment of REQUEST's spec (or `request`) on profile `local` whose runs at each GPU count took these
    seconds per timed epoch, one run per value."""
    experiment = experiment_row(session, name, request={"name": name, **(request or REQUEST)})
    for gpus, values in seconds.items():
        for index, value in enumerate(values):
            records: list[WorkerRecord] = [start(), epoch(1, value * 2), *(epoch(2 + e, value) for e in range(timed))]
            path = tmp_path / f"{name}-{gpus}-{index}"
            run = printed_run(session, experiment, path, records, gpus=gpus, epochs=timed + 1)
            run.profile, run.image_digest, run.torch_version = "local", digest, "2.5.1"
            session.add(run)
    session.commit()
    return experiment


def steady(factor: float = 1.0) -> dict[int, list[float]]:
    return {gpus: [base * factor * wobble for wobble in (1.0, 1.02, 0.99)] for gpus, base in ((1, 10.0), (2, 5.0))}


def test_a_later_experiment_of_the_same_spec_is_compared_point_by_point(client, session, tmp_path):
    reference = measured(session, tmp_path, "ref", steady())
    same = measured(session, tmp_path, "again", steady(1.01))
    slowed = measured(session, tmp_path, "slow", steady(2.0))
    pinned = client.put(f"/api/experiments/{reference.id}/reference")
    assert pinned.status_code == 200, pinned.text
    assert pinned.json()["role"] == "reference" and pinned.json()["profile"] == "local"

    body = client.get(f"/api/experiments/{same.id}/regression").json()
    assert body["reference_id"] == reference.id and body["against"] == "pinned" and body["same_spec"]
    assert body["verdict"] == "indistinguishable" and not body["hedged"]
    assert body["floor"] == {"profile": "local", "floor": 0.22, "source": "default", "points": 0, "ratios": []}
    assert [(p["series"], p["gpus"]) for p in body["points"]] == [("ddp", 1), ("ddp", 2)]
    point = body["points"][0]
    assert (point["reference_n"], point["later_n"], point["measure"]) == (3, 3, "epoch_time_s")
    assert point["ci_low"] <= point["ratio"] <= point["ci_high"] and point["flags"] == []
    assert (body["resamples"], body["seed"]) == (2000, 35)

    slow = client.get(f"/api/experiments/{slowed.id}/regression").json()
    assert slow["verdict"] == "regressed"
    assert all(p["verdict"] == "regressed" and p["ratio"] > 1.9 for p in slow["points"])
    flag = slow["points"][0]["flags"][0]
    assert flag["code"] == "regressed" and flag["severity"] == "warning" and "default" in flag["message"]
    assert "22.0 %" in slow["summary"] or "22.0%" in slow["summary"]


def test_the_name_seed_and_repeats_are_not_the_spec_but_the_grid_and_profile_are(client, session, tmp_path):
    reference = measured(session, tmp_path, "ref", steady())
    client.put(f"/api/experiments/{reference.id}/reference")
    renamed = {**REQUEST, "repeats": 5, "base": {**REQUEST["base"], "seed": 7}}
    alike = measured(session, tmp_path, "other name", steady(), request=renamed)
    assert client.get(f"/api/experiments/{alike.id}/regression").status_code == 200
    wider = measured(
        session, tmp_path, "wider", {**steady(), 4: [2.5, 2.6]}, request={**REQUEST, "grid": {"gpus": [1, 2, 4]}}
    )
    missing = client.get(f"/api/experiments/{wider.id}/regression")
    assert missing.status_code == 404 and "no reference is pinned" in missing.text
    # Compared on purpose with another spec (an overlay), the answer says so and hedges.
    chosen = client.get(f"/api/experiments/{wider.id}/regression", params={"against": reference.id}).json()
    assert chosen["against"] == "chosen" and not chosen["same_spec"] and chosen["hedged"]
    assert "not of the same spec" in chosen["summary"]


def test_a_profiles_aa_pairs_set_its_floor_and_a_20_percent_slowdown_is_then_seen(client, session, tmp_path):
    reference = measured(session, tmp_path, "ref", steady())
    twin = measured(session, tmp_path, "twin", steady(1.01))
    slower = measured(session, tmp_path, "slower", steady(1.2))
    refused = client.put(f"/api/experiments/{twin.id}/aa")
    assert refused.status_code == 409 and "pin one" in refused.json()["detail"]
    client.put(f"/api/experiments/{reference.id}/reference")
    assert client.get(f"/api/experiments/{slower.id}/regression").json()["verdict"] == "indistinguishable"
    marked = client.put(f"/api/experiments/{twin.id}/aa")
    assert marked.status_code == 200 and marked.json()["pair_of"] == reference.id

    floors = client.get("/api/noise-floors").json()["data"]
    assert [(f["profile"], f["source"], f["points"]) for f in floors] == [("local", "aa_pairs", 2)]
    assert 0.005 < floors[0]["floor"] < 0.02
    body = client.get(f"/api/experiments/{slower.id}/regression").json()
    assert body["verdict"] == "regressed" and body["floor"]["source"] == "aa_pairs"
    assert "learned from the profile's A/A pairs" in body["points"][0]["flags"][0]["message"]
    assert client.put(f"/api/experiments/{reference.id}/aa").status_code == 409  # the reference is no twin of itself


def test_a_flagged_reference_hedges_the_verdict_and_says_why(client, session, tmp_path):
    reference = measured(session, tmp_path, "ref", steady(), timed=1)  # one timed epoch: too short to time by
    later = measured(session, tmp_path, "later", steady(2.0), timed=1)
    client.put(f"/api/experiments/{reference.id}/reference")
    body = client.get(f"/api/experiments/{later.id}/regression").json()
    assert body["verdict"] == "regressed" and body["hedged"] and "Hedged" in body["summary"]
    point = body["points"][0]
    assert [flag["code"] for flag in point["reference_flags"]] == ["too_short"]
    assert "too_short" in point["hedge"] and "pin a new reference" in point["hedge"]


def test_pinning_another_replaces_the_reference_and_unpinning_takes_it_off(client, session, tmp_path):
    first = measured(session, tmp_path, "first", steady())
    second = measured(session, tmp_path, "second", steady(1.01))
    client.put(f"/api/experiments/{first.id}/reference")
    client.put(f"/api/experiments/{second.id}/reference")
    assert client.get(f"/api/experiments/{first.id}/regression").json()["reference_id"] == second.id
    assert client.get(f"/api/references/{first.id}/history").status_code == 404
    assert client.delete(f"/api/experiments/{second.id}/reference").status_code == 204
    assert client.get(f"/api/experiments/{first.id}/regression").status_code == 404
    assert client.delete(f"/api/experiments/{second.id}/reference").status_code == 404
    assert client.put("/api/experiments/nosuch/reference").status_code == 404


def test_the_history_shows_each_experiment_of_the_spec_with_its_verdict_and_image(client, session, tmp_path):
    reference = measured(session, tmp_path, "ref", steady(), digest="sha256:" + "a" * 64)
    twin = measured(session, tmp_path, "twin", steady(1.01), digest="sha256:" + "a" * 64)
    other = measured(session, tmp_path, "other", {1: [10.0, 10.1]}, request={**REQUEST, "grid": {"gpus": [1]}})
    drifted = measured(session, tmp_path, "new image", steady(2.0), digest="sha256:" + "b" * 64)
    client.put(f"/api/experiments/{reference.id}/reference")
    client.put(f"/api/experiments/{twin.id}/aa")
    body = client.get(f"/api/references/{reference.id}/history").json()
    entries = body["entries"]
    assert [e["experiment_id"] for e in entries] == [reference.id, twin.id, drifted.id]
    assert other.id not in {e["experiment_id"] for e in entries}
    assert [(e["role"], e["verdict"]) for e in entries] == [
        ("reference", "indistinguishable"),
        ("aa", "indistinguishable"),
        ("later", "regressed"),
    ]
    assert entries[2]["image_digest"] == "sha256:" + "b" * 64 and entries[2]["torch_version"] == "2.5.1"
    assert body["floor"]["source"] == "aa_pairs" and body["reference"]["experiment_id"] == reference.id
    assert not body["truncated"]


def test_runs_not_finished_count_for_no_verdict(client, session, tmp_path):
    reference = measured(session, tmp_path, "ref", {1: [10.0]})
    later = measured(session, tmp_path, "later", {1: [20.0, 21.0]})
    client.put(f"/api/experiments/{reference.id}/reference")
    body = client.get(f"/api/experiments/{later.id}/regression").json()
    assert body["verdict"] == "no_verdict" and body["points"][0]["ci_low"] is None
    run = session.get(Run, body["points"][0]["later_run_ids"][0])
    assert run is not None


def test_the_report_compares_with_the_pinned_reference_or_a_chosen_experiment(client, session, tmp_path):
    reference = measured(session, tmp_path, "ref", steady())
    slowed = measured(session, tmp_path, "slow", steady(2.0))
    wider = {**REQUEST, "grid": {"gpus": [1, 2, 4]}}
    other = measured(session, tmp_path, "other spec", {**steady(), 4: [2.5, 2.6]}, request=wider)
    # Nothing pinned: the report has no such section.
    assert 'id="regression"' not in client.get(f"/api/experiments/{slowed.id}/report.html").text
    assert client.put(f"/api/experiments/{reference.id}/reference").status_code == 200

    report = client.get(f"/api/experiments/{slowed.id}/report.html").text
    assert '<section id="regression" aria-labelledby="regression-title" data-verdict="regressed">' in report
    assert f"Against the pinned reference {reference.id}" in report
    assert report.count('<tr class="regression-point" data-verdict="regressed">') == 2
    assert "the default: profile local has no A/A pair yet" in report
    # Both sides drawn together: the reference dashed, this experiment solid and ringed where regressed.
    assert 'id="chart-regression"' in report and f"ddp: reference {reference.id}" in report
    assert report.count('<g class="point flagged">') >= 2
    # The reference's own report compares it with nothing.
    assert 'id="regression"' not in client.get(f"/api/experiments/{reference.id}/report.html").text

    # An overlay with a chosen experiment, of another spec, says so.
    chosen = client.get(f"/api/experiments/{slowed.id}/report.html", params={"against": other.id}).text
    section = chosen[chosen.index('<section id="regression"') :]
    assert f"Against experiment {other.id}" in section, section[:800]
    assert "not of the same spec" in section and "On one side only: ddp at 4 GPUs" in section
    missing = client.get(f"/api/experiments/{slowed.id}/report.html", params={"against": "nope"})
    assert missing.status_code == 422 and missing.json()["detail"][0]["loc"] == ["query", "against"]
