"""Names MLflow refuses ('@' in 'all_gold@5', brackets) are rewritten before params and metrics are logged."""

from __future__ import annotations

import mlflow

from experiments import tracking


def test_params_and_metrics_with_at_signs_are_logged(tmp_path, new_store):
    uri = new_store(tmp_path / "mlflow.db")
    tracking.configure(uri, tmp_path, "names")  # the store's own experiment, not one an earlier test left active
    params = {"retriever": {"ranker": {"fitted_on": {"scores": {"held_out": {"all_gold@3": 0.8}}}}}}
    with tracking.run("names", params) as active:
        tracking.log_metrics({"held_out": {"all_gold@3": 0.8, "x[y]": 1.0}})
    run = mlflow.MlflowClient(uri).get_run(active.info.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.params["retriever.ranker.fitted_on.scores.held_out.all_gold_at_3"] == "0.8"
    assert run.data.metrics == {"held_out.all_gold_at_3": 0.8, "held_out.x_y_": 1.0}
    assert tracking.mlflow_name("recall@5 / p50") == "recall_at_5 / p50"
