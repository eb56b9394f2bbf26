"""GET /api/v1/compare, its CSV and the dashboard's /compare page with one model name measured with two
`--config`s, on SQLite and on the real PostgreSQL: a row per workload, each with its display name and
workload key in the columns the OpenAPI document names. Given / When / Then in the test's comments."""

from __future__ import annotations

import csv
import io

from flask.testing import FlaskClient

from mlscope.contract.workload import workload_key
from mlscope.store import Store
from mlscope.store.records import COMPARE_COLUMNS
from tests.contract.builders import finish, make_measurement, run_to
from tests.integration.test_api_reads import store  # noqa: F401  (the fixture: SQLite and PostgreSQL)


def test_the_comparison_has_a_row_per_workload_with_its_display_name(
    store: Store,  # noqa: F811
    http: FlaskClient,
) -> None:
    # Given hf:gpt2 measured with n_layer=2 twice and with n_layer=4 once
    ids = {}
    for layers in (2, 2, 4):
        id = run_to(
            store, "running", model="hf:gpt2", request={"model_options": {"config": {"n_layer": layers}}}
        )
        finish(store, id, measurements=[make_measurement("offline", 1)])
        ids[layers] = id

    # When compared through the API, Then each workload is a row, named with its overrides
    compared = http.get("/api/v1/compare?models=hf:gpt2").get_json()
    columns = compared["columns"]
    assert columns == list(COMPARE_COLUMNS)
    assert columns[columns.index("model") + 1] == "display_name"
    assert columns[columns.index("evaluation_id") - 1] == "workload_key"
    rows = compared["rows"]
    assert [(r["display_name"], r["runs"], r["evaluation_id"]) for r in rows] == [
        ("hf:gpt2[n_layer=2]", 2, ids[2]),
        ("hf:gpt2[n_layer=4]", 1, ids[4]),
    ]
    for row in rows:
        assert row["workload_key"] == workload_key(store.get_evaluation(row["evaluation_id"]), "offline")
    # ... and the CSV holds the same columns and rows
    lines = list(csv.DictReader(io.StringIO(http.get("/api/v1/compare?format=csv").get_data(as_text=True))))
    assert [(r["display_name"], r["runs"], r["workload_key"]) for r in lines] == [
        (r["display_name"], str(r["runs"]), r["workload_key"]) for r in rows
    ]
    # ... the dashboard's table shows the display names
    page = http.get("/compare").get_data(as_text=True)
    assert "<td>hf:gpt2[n_layer=2]</td>" in page and "<td>hf:gpt2[n_layer=4]</td>" in page
    # ... and the OpenAPI document names every column, the new ones among them
    document = http.get("/api/openapi.json").get_json()
    schema = document["components"]["schemas"]["Compare"]["properties"]["columns"]["items"]
    assert schema["enum"] == list(COMPARE_COLUMNS)
