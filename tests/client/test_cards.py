"""`scalelab card export|verify|import`: the card written byte for byte as the server sent it, its verdict printed
with every field at fault named and exit 1, a card refused on import with nothing kept, and a file that is no card
named before anything is sent."""

from __future__ import annotations

import json

from client import cli
from contract.card import content_hash, hashed
from tests.client.helpers import scalelab
from tests.server.api.test_cards import finished_experiment


def test_export_verify_import_round_trip(client, capsys, tmp_path):
    experiment_id = finished_experiment(client)
    target = tmp_path / "canary.json"
    code, out, err = scalelab(client, capsys, "card", "export", experiment_id, "-o", str(target))
    assert (code, err) == (cli.EXIT_OK, "")
    assert out.startswith(f"wrote {target} (") and "6 runs, sha256:" in out
    written = json.loads(target.read_text())
    assert written["content_hash"] == content_hash(written) and out.rstrip().endswith(f"{written['content_hash']})")

    code, out, _ = scalelab(client, capsys, "card", "verify", str(target))
    assert code == cli.EXIT_OK
    assert out.startswith("verified: 6 runs, 42 records")

    code, out, _ = scalelab(client, capsys, "card", "verify", "--offline", str(target))
    assert code == cli.EXIT_OK and "were not recomputed" in out

    code, out, _ = scalelab(client, capsys, "card", "import", str(target), "-q")
    assert code == cli.EXIT_OK
    imported = out.strip()
    assert client.get(f"/api/experiments/{imported}").json()["card"]["original_id"] == experiment_id


def test_an_edited_card_is_exit_1_naming_the_field(client, capsys, tmp_path):
    experiment_id = finished_experiment(client)
    card = client.get(f"/api/experiments/{experiment_id}/card").json()
    card["runs"][0]["provenance"]["image_digest"] = None
    target = tmp_path / "edited.json"
    target.write_text(json.dumps(card))

    code, out, _ = scalelab(client, capsys, "card", "verify", "--offline", str(target))
    assert code == cli.EXIT_FAILED and "content_hash" in out

    target.write_text(json.dumps(hashed(card)))
    code, out, _ = scalelab(client, capsys, "card", "verify", str(target))
    assert code == cli.EXIT_FAILED
    assert out.splitlines()[0] == "NOT VERIFIED: 1 problems"
    assert "runs[0].provenance.image_digest: the card says null" in out

    code, _, err = scalelab(client, capsys, "card", "import", str(target))
    assert code == cli.EXIT_USAGE
    assert "runs.0.provenance.image_digest: the card says null" in err and "nothing was imported" in err


def test_a_file_that_is_no_card_is_named_before_anything_is_sent(client, capsys, tmp_path):
    broken = tmp_path / "broken.json"
    broken.write_text('{"card_version": 1,')
    code, out, err = scalelab(client, capsys, "card", "verify", str(broken))
    assert (code, out) == (cli.EXIT_USAGE, "")
    assert err.startswith(f"scalelab: error: {broken}: not JSON (")
    other = tmp_path / "other.json"
    other.write_text('{"card_version": 1}')
    code, _, err = scalelab(client, capsys, "card", "import", str(other))
    assert code == cli.EXIT_USAGE
    assert "is no scaling card: content_hash: Field required" in err
    code, _, err = scalelab(client, capsys, "card", "verify", str(tmp_path / "missing.json"))
    assert code == cli.EXIT_USAGE and "cannot read" in err


def test_a_live_experiment_leaves_no_file(client, capsys, tmp_path):
    created = client.post("/api/experiments", json={"name": "x", "base": {"epochs": 1}}).json()
    target = tmp_path / "card.json"
    code, _, err = scalelab(client, capsys, "card", "export", created["id"], "-o", str(target))
    assert code == cli.EXIT_FAILED and "have not ended" in err
    assert not target.exists()
