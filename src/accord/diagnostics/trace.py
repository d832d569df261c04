"""A job's flight-recorder dumps as one Chrome/Perfetto timeline.

Owns: turning the dumps of a job (``merge.load``) into the Trace Event Format that
chrome://tracing and https://ui.perfetto.dev open: one process row per rank (named with its
host and pid), one thread row per group for its collectives and one for its point-to-point
operations, a complete ("X") event per recorded call, an instant event where each rank
dumped. Each collective's event says who arrived last to it and how long this rank waited
for that (``last_arrival``, ``waited_for_last_us``), so a late rank shows at a glance.
``accord flight-recorder DIR --trace out.json`` writes it. Must not know about live groups:
it reads the dumps' plain data only.

Times are microseconds from the earliest event of the job (``otherData.time_origin_unix_s``
is that instant); a call still open when its rank dumped ends at the dump.
"""

from __future__ import annotations

from typing import Any

#: Colours of the trace viewer's reserved palette, by state.
_COLOURS = {"started": "terrible", "failed": "bad"}


def _tid(group_id: int, p2p: bool) -> int:
    return 2 * group_id + (1 if p2p else 0)


def trace(dumps: dict[int, dict[str, Any]]) -> dict[str, Any]:
    """The Trace Event Format document of ``dumps`` (rank → dump)."""
    starts = [
        e["start"] for d in dumps.values() for g in d["groups"] for e in [*g["entries"], *g.get("p2p", [])]
    ]
    origin = min(starts, default=min((d["time"] for d in dumps.values()), default=0.0))
    arrivals = _arrivals(dumps)
    events: list[dict[str, Any]] = []

    def us(t: float) -> float:
        return round((t - origin) * 1e6, 3)

    for rank in sorted(dumps):
        dump = dumps[rank]
        events.append(
            {
                "ph": "M",
                "name": "process_name",
                "pid": rank,
                "tid": 0,
                "args": {"name": f"rank {rank} ({dump.get('host')}, pid {dump.get('pid')})"},
            }
        )
        events.append(
            {"ph": "M", "name": "process_sort_index", "pid": rank, "tid": 0, "args": {"sort_index": rank}}
        )
        dumped_at = dump["time"]
        for group in dump["groups"]:
            gid, name, desc = group["id"], group["name"], group.get("desc")
            if desc and desc != name:
                name = f"{name} ({desc})"  # the default group: "0 (default_pg)"
            for p2p, label in ((False, f"group {name}"), (True, f"group {name}: p2p")):
                events.append(
                    {
                        "ph": "M",
                        "name": "thread_name",
                        "pid": rank,
                        "tid": _tid(gid, p2p),
                        "args": {"name": label},
                    }
                )
            for entry in group["entries"]:
                args = {k: v for k, v in entry.items() if k not in ("start", "end", "duration_s")}
                last = arrivals.get((gid, entry["seq"]))
                if last is not None:
                    args["last_arrival"] = f"rank {last[1]}"
                    args["waited_for_last_us"] = round(max(0.0, last[0] - entry["start"]) * 1e6, 3)
                events.append(
                    _complete(
                        f"{entry['op']} #{entry['seq']}",
                        "collective",
                        rank,
                        _tid(gid, False),
                        us(entry["start"]),
                        _duration(entry, dumped_at),
                        entry["state"],
                        args,
                    )
                )
            for item in group.get("p2p", []):
                towards = "to" if item["op"] in ("send", "isend") else "from"
                peer = "any" if item.get("peer") is None else item["peer"]
                args = {k: v for k, v in item.items() if k not in ("start", "end", "duration_s")}
                events.append(
                    _complete(
                        f"{item['op']} {towards} {peer} (tag {item['tag']})",
                        "p2p",
                        rank,
                        _tid(gid, True),
                        us(item["start"]),
                        _duration(item, dumped_at),
                        item["state"],
                        args,
                    )
                )
        events.append(
            {
                "ph": "i",
                "s": "p",
                "name": "flight recorder dumped",
                "cat": "dump",
                "pid": rank,
                "tid": 0,
                "ts": us(dumped_at),
                "args": {"reason": str(dump.get("reason", ""))[:2000]},
            }
        )
    return {
        "traceEvents": events,
        "displayTimeUnit": "ms",
        "otherData": {
            "source": "accord flight recorder",
            "ranks": sorted(dumps),
            "time_origin_unix_s": origin,
        },
    }


def _duration(entry: dict[str, Any], dumped_at: float) -> float:
    start: float = entry["start"]
    end: float = entry.get("end") or max(dumped_at, start)
    return round(max(0.0, end - start) * 1e6, 3)


def _complete(
    name: str, cat: str, pid: int, tid: int, ts: float, dur: float, state: str, args: dict[str, Any]
) -> dict[str, Any]:
    event = {
        "ph": "X",
        "name": name if state == "completed" else f"{name} ({state})",
        "cat": cat,
        "pid": pid,
        "tid": tid,
        "ts": ts,
        "dur": dur,
        "args": args,
    }
    if state in _COLOURS:
        event["cname"] = _COLOURS[state]
    return event


def _arrivals(dumps: dict[int, dict[str, Any]]) -> dict[tuple[int, int], tuple[float, int]]:
    """(group id, seq) → (latest start, the rank that started then), over the ranks that
    recorded the call (at least two)."""
    seen: dict[tuple[int, int], list[tuple[float, int]]] = {}
    for rank, dump in dumps.items():
        for group in dump["groups"]:
            for entry in group["entries"]:
                seen.setdefault((group["id"], entry["seq"]), []).append((entry["start"], rank))
    return {key: max(starts) for key, starts in seen.items() if len(starts) > 1}
