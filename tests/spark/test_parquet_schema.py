"""``dump --format parquet`` (pyarrow alone) writes the columns and types of the Spark sources and export."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import case_dir
from typer.testing import CliRunner

pytest.importorskip("pyspark")
pq = pytest.importorskip("pyarrow.parquet")

from pyspark.sql.pandas.types import to_arrow_schema  # noqa: E402

from rmqstore.cli import app  # noqa: E402
from rmqstore.spark.source import CONSUMEQUEUE_SCHEMA, commitlog_schema  # noqa: E402

pytestmark = pytest.mark.spark


def test_parquet_schema_is_the_spark_sources(tmp_path: Path) -> None:
    store = case_dir("4.9.4/clean-2topics") / "store"
    runner = CliRunner()
    for crc in (False, True):
        out = tmp_path / f"log-{crc}.parquet"
        argv = ["dump", "commitlog", str(store), "-f", "parquet", "-o", str(out)] + ["--verify-crc"] * crc
        assert runner.invoke(app, argv).exit_code == 0
        assert pq.read_schema(out).equals(to_arrow_schema(commitlog_schema(crc_ok=crc), timezone="UTC"))
    cq = tmp_path / "cq.parquet"
    assert (
        runner.invoke(
            app, ["dump", "consumequeue", str(store), "TopicA", "0", "-f", "parquet", "-o", str(cq)]
        ).exit_code
        == 0
    )
    assert pq.read_schema(cq).equals(to_arrow_schema(CONSUMEQUEUE_SCHEMA, timezone="UTC"))
