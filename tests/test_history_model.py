"""History per model (``python -m pytest_fsdpcheck.commands.history --model``):
the per-release lines from recorded release outcomes (no torch installed),
the CLI wiring with the per-release run replaced, and ``--describe-model``
on the installed torch against the exposure's prediction for it."""

import json

import pytest

pytestmark = pytest.mark.unit

torch = pytest.importorskip("torch")

from pytest_fsdpcheck.cases.exposure import Exposure, case_of, exposure  # noqa: E402
from pytest_fsdpcheck.commands import history  # noqa: E402

TIED = "tests.planted.plans:good"  # TinyLM, embed and lm_head tied, with a plan

#: a tied model's bucket plan as torch 2.3.1 and 2.4.1 gave it (module form
#: both: Dynamo inlines built-in modules only from 2.5), and 2.5.1 (dynamo form)
_GROUPS = [{"call": "fully_shard(<root>)", "modules": ["embed", "lm_head", "<root>"], "params": ["embed.weight"]}]


def _release(version, buckets, form, known, groups=_GROUPS):
    return {"version": version, "exit": 0, "summary": "8 passed", "seconds": 1.0, "known_bugs": known,
            "outcome": {"torch": version, "form": form, "buckets": buckets, "groups": groups}}


RECORDED = [
    _release("2.3.1", [{"bytes": 1024, "params": ["embed.weight"]}, {"bytes": 512, "params": ["lm_head.weight"]}],
             "module", ["spl-param-counted-per-node"]),
    _release("2.4.1", [{"bytes": 1024, "params": ["embed.weight"]}, {"bytes": 512, "params": ["lm_head.weight"]}],
             "module", ["spl-param-counted-per-use"]),
    _release("2.5.1", [{"bytes": 512, "params": ["embed.weight"]}, {"bytes": 512, "params": ["embed.weight"]}],
             "dynamo", ["spl-param-counted-per-use"], groups=[]),
]

EXPOSURES = [
    Exposure("spl-param-counted-per-node", "splitting", "bucket 0 counts 512 bytes twice (embed.weight)",
             "2.0–2.3", "<2.4", "2.0.1 … 2.3.1", "replayed", "module"),
    Exposure("spl-param-counted-per-use", "splitting", "bucket 0 counts 512 bytes twice (embed.weight)",
             "2.4", ">=2.4", "2.4.1 … 2.15.0", "replayed", "module"),
    Exposure("spl-param-counted-per-use", "splitting", "bucket 0 counts 512 bytes twice (embed.weight)",
             "2.5–2.15", ">=2.4", "2.4.1 … 2.15.0", "replayed", "dynamo"),
]


def test_model_lines_show_changes_and_the_bugs_that_explain_them():
    lines = history.model_lines(RECORDED, EXPOSURES)
    assert lines == [
        "torch 2.3.1 (2.3.1): exit 0, 1.0 s — 8 passed",
        "  bucket plan (module form): 2 buckets, bytes 1,024, 512",
        "    bucket 0: embed.weight",
        "    bucket 1: lm_head.weight",
        "  FSDP2 group fully_shard(<root>): 3 modules, params embed.weight",
        "  known bugs the exposure predicts here: spl-param-counted-per-node",
        "  known bugs the suite judged: spl-param-counted-per-node",
        "torch 2.4.1 (2.4.1): exit 0, 1.0 s — 8 passed",
        "  bucket plan: as on the previous release",
        "  FSDP2 groups: as on the previous release",
        "  known bugs the exposure predicts here: spl-param-counted-per-use",
        "  since torch 2.3.1: spl-param-counted-per-node, spl-param-counted-per-use",
        "  known bugs the suite judged: spl-param-counted-per-use",
        "torch 2.5.1 (2.5.1): exit 0, 1.0 s — 8 passed",
        "  bucket plan (dynamo form): 2 buckets, bytes 512, 512",
        "    bucket 0: embed.weight",
        "    bucket 1: embed.weight",
        "  known bugs the exposure predicts here: spl-param-counted-per-use",
        "  since torch 2.4.1: spl-param-counted-per-use",
        "  known bugs the suite judged: spl-param-counted-per-use",
    ]


def test_model_lines_name_a_failed_release():
    lines = history.model_lines([{"version": "2.99.0", "error": "torch install failed: no such version"}], [])
    assert lines == ["torch 2.99.0: torch install failed: no such version"]


def test_cli_runs_each_release_and_prints_the_lines(monkeypatch, tmp_path, capsys):
    ran = []
    recorded = {r["version"]: r for r in RECORDED}
    monkeypatch.setattr(history, "build_wheel", lambda into: into / "pytest_fsdpcheck-0-py3-none-any.whl")

    def fake_release(version, spec, wheel, model_path):
        ran.append((version, spec, model_path))
        return recorded[version]

    monkeypatch.setattr(history, "run_model_release", fake_release)
    out = tmp_path / "h.json"
    rc = history.main(["--model", TIED, "--model-path", "/somewhere", "--json", str(out), "2.3.1", "2.4.1"])
    assert rc == 0
    assert ran == [("2.3.1", TIED, "/somewhere"), ("2.4.1", TIED, "/somewhere")]
    printed = capsys.readouterr().out.splitlines()
    # the exposure computed here (on the installed torch) predicts the release lines
    predicts = [line for line in printed if line.startswith("  known bugs the exposure predicts here: ")]
    assert len(predicts) == 2
    assert "spl-param-counted-per-node" in predicts[0] and "spl-param-counted-per-use" not in predicts[0]
    assert "spl-param-counted-per-use" in predicts[1] and "spl-param-counted-per-node" not in predicts[1]
    assert "  since torch 2.3.1: spl-param-counted-per-node, spl-param-counted-per-use" in printed
    assert [r["version"] for r in json.loads(out.read_text())] == ["2.3.1", "2.4.1"]


def test_describe_model_on_the_installed_torch_matches_the_exposure(capsys):
    assert history.main(["--describe-model", TIED]) == 0
    outcome = json.loads(capsys.readouterr().out)
    assert outcome["torch"] == torch.__version__
    counted = [p for b in outcome["buckets"] for p in b["params"]]
    predicted = {e.bug for e in exposure(case_of(TIED)) if e.exposed and e.area == "splitting"
                 and e.form == outcome["form"] and history_holds(e, torch.__version__)}
    # the tied weight counted twice exactly where the exposure predicts a splitting bug
    assert (counted.count("embed.weight") == 2) == bool(predicted)
    assert [g["call"] for g in outcome["groups"]] == ["fully_shard(layers.0)", "fully_shard(layers.1)",
                                                      "fully_shard([embed, lm_head])", "fully_shard(<root>)"]


def history_holds(e, version):
    from pytest_fsdpcheck.cases.exposure import _holds
    from pytest_fsdpcheck.impls.torch_bugs import TORCH_BUGS

    return _holds({b.id: b for b in TORCH_BUGS}[e.bug], e.form, version)
