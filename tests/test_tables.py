"""The docs' and the model card's which-map figures are generated from the committed reports
(viewer/analysis/tables.py), never typed: the committed text must equal what the reports give."""
from __future__ import annotations

import copy
import os
import re

from viewer.analysis import tables
from viewer.paths import ROOT


def test_committed_tables_equal_what_the_committed_reports_give():
    reports = tables.load_reports()
    for path in tables.FILES:
        text = open(path).read()
        assert tables.render(text, reports) == text, f"{path}: run python -m viewer.analysis.tables"
    card = open(tables.FILES[1]).read()
    for name in ("which-map-coverage", "which-map-table", "which-map-verdicts"):
        assert f"<!-- generated:{name} -->" in card
    assert "<!-- generated:which-map-summary -->" in open(os.path.join(ROOT, "docs", "explanations.md")).read()
    assert os.path.join(ROOT, "docs", "explanations.md") in tables.FILES   # every docs page is rewritten


def test_the_table_has_a_row_per_method_and_says_what_the_reports_say():
    reports = tables.load_reports()
    if not reports:
        assert tables.summary(reports) == "No which-map report is committed yet."
        return
    table = tables.method_table(reports)
    for model, r in reports.items():
        rows = [line for line in table.splitlines() if line.startswith(f"| `{model}` |")]
        assert len(rows) == len(r["by_method"]) + 1                      # every method, then the baselines
        att = r["by_method"]["attention"]
        assert f"{att['blur']['auc_morf']:.2f}" in rows[0] and f"{att['road']['road']:.2f}" in rows[0]
    words = tables.summary(reports)
    assert ("Partial runs" in words) == any(r["partial"] for r in reports.values())
    # a method that beats attention under both imputers is named as such; one that loses, as worse
    fake = copy.deepcopy(reports)
    model = next(iter(fake))
    methods = list(fake[model]["target"]["verdict"])
    fake[model]["target"]["verdict"][methods[0]] = "ranks what the word used worse than attention under every imputer"
    assert re.search(rf"Worse than attention under both: [^.]*{re.escape(methods[0])} \(`{model}`\)", tables.summary(fake))


def test_each_committed_report_is_the_reduce_of_its_committed_records():
    """reports/explain/MODEL.json holds exactly what its records file MODEL.jsonl reduces to: no
    figure in it was typed, kept from an older run, or left from a withdrawn measure."""
    import json
    import os
    from viewer.analysis.explain_eval import committed_report
    reports = tables.load_reports()
    assert reports, "the which-map reports are committed"
    for model, report in reports.items():
        records = os.path.join(tables.REPORTS, f"{model}.jsonl")
        again = committed_report(records, report["split_photos"])
        assert json.loads(json.dumps(again)) == report, f"{model}: run python -m viewer.analysis.explain_eval again"
    fake = copy.deepcopy(reports)
    assert "Not measured in the committed records yet" in tables.sun_table(
        {m: {**r, "sun_ablation": None} for m, r in fake.items()})


def test_the_answers_table_reads_its_reports(tmp_path):
    """One row per question answering model beside the commonest answer, in percent with intervals."""
    import json as _json
    from viewer.analysis.answers import commonest_answers, qa_report
    from viewer.analysis.tables import answers_table
    from viewer.data.questions import Question
    items = [Question(f"p{i}.jpg", t, f"q{i}", a, 2) for i, (t, a) in
             enumerate([("object", "dog"), ("object", "man"), ("number", "two"), ("colour", "red"), ("location", "beach")])]
    said = ["dog", "dog", "two", "blue", "beach"]
    for name in ("vqa-regions", "vqa-blind"):
        (tmp_path / name).mkdir()
        report = qa_report(name, said if name == "vqa-regions" else ["man"] * 5, items, commonest_answers(items),
                           "dev-report")
        if name == "vqa-regions":   # evaluate --questions' grounding block (analysis/answers.py)
            report["grounding"] = {"detected": 2, "pointing": 0.5, "pointing_ci": [0.0, 1.0],
                                   "pointing_centre_baseline": 0.25, "pointing_top_detection_baseline": 0.75,
                                   "mass_in_box": 0.4, "mass_uniform_baseline": 0.2}
        (tmp_path / name / "report.json").write_text(_json.dumps(report))
    lines = answers_table(folder=str(tmp_path)).splitlines()
    assert lines[2].startswith("| `vqa-regions` | 50.0 [") and "| 100.0 [" in lines[2] and "| 0.0 [" in lines[2]
    assert lines[2].endswith("| 50.0 [0.0, 100.0] (25.0) |") and lines[3].endswith("| – | – |")
    assert lines[3].startswith("| `vqa-blind` | 50.0")                    # "man" is right once in two objects
    assert "(2 for `vqa-regions`)" in answers_table(folder=str(tmp_path))
    assert lines[4].startswith("| commonest answer per type |")
    assert "5 questions generated from the captions of dev-report" in answers_table(folder=str(tmp_path))
