"""accord bench --tp's report: communication's cost per token against the free-communication
job (TP's floor), and the token check, which leaves that job's wrong sums out."""

from __future__ import annotations

from types import SimpleNamespace

from accord.bench.tp_report import TpRow, as_json, comm_costs, summarize, table, token_mismatches


def _row(impl: str, ms: float) -> TpRow:
    return TpRow(impl, ms, ms, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, ms, {}, [ms], [0.0])


def test_comm_cost_is_ms_per_token_less_the_free_jobs() -> None:
    lines = comm_costs([_row("accord", 14.0), _row("gloo", 25.0), _row("free", 12.5), _row("one", 7.0)])
    assert lines[0] == "#   accord: 1.50 ms of 14.00 per token (11 %)"
    assert lines[1] == "#   gloo: 12.50 ms of 25.00 per token (50 %)"
    assert lines[2].startswith("#   the floor (free) is 0.50× gloo's ms/token")
    assert len(lines) == 3  # nothing for free itself or the one-process run


def test_no_free_job_no_cost_lines() -> None:
    assert comm_costs([_row("accord", 14.0), _row("gloo", 25.0)]) == []


def test_the_free_jobs_tokens_are_left_out_of_the_check() -> None:
    def ranks(*tokens: list[int]) -> list[SimpleNamespace]:
        return [SimpleNamespace(tokens=t) for t in tokens]

    results = {"accord": ranks([1, 2], [1, 2]), "free": ranks([5, 6], [7, 8]), "one": ranks([1, 2])}
    assert token_mismatches(results, skip=("free",)) == []
    assert token_mismatches(results) == [
        "free: rank 1 decoded other tokens than rank 0",
        "free decoded other tokens than accord from token 0 on",
    ]


def test_a_job_that_never_syncs_has_no_skew_shown_as_a_dash_and_null_in_json() -> None:
    rank = SimpleNamespace(
        times=[0.01, 0.012],
        comm={"token_us": 10e3, "comm_us": 1e3, "issue_us": 0.0, "wait_us": 0.0, "backend_us": 0.0,
              "counts": {}, "tokens": 1},
        tokens=[1],
        spans=[(0.0, 1.0)],
    )
    row = summarize("free", [rank, rank], synced=False)
    assert row.skew_ms != row.skew_ms  # nan
    assert summarize("accord", [rank, rank]).skew_ms == 0.0  # (both ranks issued at once)
    line = table([row]).splitlines()[-1]
    assert line.split()[-2] == "—", line
    assert as_json([row])[0]["skew_ms"] is None
