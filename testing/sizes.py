"""What a benched database holds: rows and bytes per row of each table and index, and rows per run.

The capacity model (docs/scaling.md) takes its row sizes from here, measured on a database a
benchmark filled (``bench/engine.py --sizes``, ``bench/deliveries.py --sizes``) rather than
guessed from the column types.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from engine.platform.database import libpq_conninfo

# Rows that hang off a run, found by their run: (table, the condition that ties a row to run r).
PER_RUN = (
    ("step_attempts", "t.run_id = r.id"),
    ("audit_events", "t.correlation_id = r.id"),
    ("outbox_events", "t.correlation_id = r.id"),
    ("workflow_notices", "t.run_id = r.id"),
)


def table_sizes(url: str, *, min_rows: int = 100) -> str:
    """Markdown tables, after ``VACUUM (ANALYZE)``: each table of at least ``min_rows`` rows with its
    bytes per row — ``pg_column_size`` of the whole row (its data as stored, without the 24-byte tuple
    header and 4-byte line pointer), then heap, TOAST and index bytes from the relation sizes — each of
    their indexes' bytes per row, and the rows per finished run of the tables that hang off a run."""
    with psycopg.connect(libpq_conninfo(url), autocommit=True) as conn:
        conn.execute("VACUUM (ANALYZE)")
        tables = conn.execute(
            "SELECT c.oid, c.relname, pg_relation_size(c.oid), "
            "coalesce(pg_total_relation_size(nullif(c.reltoastrelid, 0)), 0), pg_indexes_size(c.oid), "
            "pg_total_relation_size(c.oid) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE c.relkind = 'r' AND n.nspname = 'public' ORDER BY pg_total_relation_size(c.oid) DESC"
        ).fetchall()
        lines = [
            "| table | rows | row bytes (pg_column_size) | heap bytes/row | TOAST bytes/row | index bytes/row "
            "| total bytes/row | total |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
        ]
        indexes = ["| table | index | bytes/row |", "| --- | --- | ---: |"]
        for oid, name, heap, toast, index, total in tables:
            counted = conn.execute(
                sql.SQL("SELECT count(*), avg(pg_column_size(t.*)) FROM {} t").format(sql.Identifier(name))
            ).fetchone()
            rows, row_bytes = (int(counted[0]), float(counted[1] or 0)) if counted else (0, 0.0)
            if rows < min_rows:
                continue
            lines.append(
                f"| {name} | {rows} | {row_bytes:.0f} | {heap / rows:.0f} | {toast / rows:.0f} | {index / rows:.0f} "
                f"| {total / rows:.0f} | {total / 1024 / 1024:.1f} MiB |"
            )
            for index_name, size in conn.execute(
                "SELECT i.relname, pg_relation_size(i.oid) FROM pg_index x JOIN pg_class i ON i.oid = x.indexrelid "
                "WHERE x.indrelid = %s ORDER BY 2 DESC",
                (oid,),
            ):
                indexes.append(f"| {name} | {index_name} | {size / rows:.1f} |")
        runs_row = conn.execute("SELECT count(*) FROM workflow_runs WHERE finished_at IS NOT NULL").fetchone()
        runs = int(runs_row[0]) if runs_row else 0
        per_run = ["| rows per finished run | count |", "| --- | ---: |", f"| finished runs | {runs} |"]
        for table, condition in PER_RUN:
            found = conn.execute(
                sql.SQL("SELECT count(*) FROM {} t JOIN workflow_runs r ON {} WHERE r.finished_at IS NOT NULL").format(
                    sql.Identifier(table), sql.SQL(condition)
                )
            ).fetchone()
            if runs and found:
                per_run.append(f"| {table} | {int(found[0]) / runs:.2f} |")
        for state, count in conn.execute(
            "SELECT a.state, count(*) FROM step_attempts a JOIN workflow_runs r ON r.id = a.run_id "
            "WHERE r.finished_at IS NOT NULL GROUP BY 1 ORDER BY 1"
        ):
            if runs:
                per_run.append(f"| step_attempts, {state} | {int(count) / runs:.2f} |")
    return "\n".join([*lines, "", *indexes, "", *per_run])
