"""What a client of the router saw while a replica was stopped: the answers of one route's load
(:func:`lab.pair_serving.answers`, one dict per request) read against the time of the stop.
Pure (standard library only), so the lab test and its captured output
(tests/fixtures/router/) share one reading."""

from __future__ import annotations

#: characters of a failed answer's body kept in the outcome (the router's error line fits)
BODY_CHARS = 200


def route_outcome(results: list[dict], stopped: float, settled_at: float) -> dict:
    """One route's answers around a replica's stop.

    Args:
        results: the client's answers, each ``{"status": HTTP status or 0 (no answer),
            "seconds": the request's duration, "t": Unix time it ended, "body": JSON or text}``.
        stopped: Unix time the stop of the replica began.
        settled_at: Unix time from which the router must have taken the dead replica out (the
            stop's end plus the router's drop bound and room for a shared machine).

    Returns:
        ``{"before": requests ended before the stop, "before_ok": all of them 200, "after":
        requests ended after it, "failed": [{"status", "after_s" (s from the stop to its end),
        "seconds", "body" (its first :data:`BODY_CHARS` characters)}], "last_failure_s": s from
        the stop to the last failure's end (None: none), "longest_outage_s": the longest span
        from a failure's end to the next 200's end (0.0: no failure; None: no 200 came after a
        failure), "settled": requests ended at or after ``settled_at``, "settled_ok": all of
        those 200}``. A client retrying that route for ``longest_outage_s`` got an answer.
    """
    ordered = sorted(results, key=lambda r: r["t"])
    before = [r for r in ordered if r["t"] < stopped]
    after = [r for r in ordered if r["t"] >= stopped]
    failed = [r for r in after if r["status"] != 200]
    settled = [r for r in ordered if r["t"] >= settled_at]
    longest: float | None = 0.0
    outage_began = None
    for r in after:
        if r["status"] != 200:
            outage_began = r["t"] if outage_began is None else outage_began
        elif outage_began is not None:
            longest = max(longest, r["t"] - outage_began)
            outage_began = None
    if outage_began is not None:
        longest = None
    return {
        "before": len(before),
        "before_ok": all(r["status"] == 200 for r in before),
        "after": len(after),
        "failed": [
            {
                "status": r["status"],
                "after_s": round(r["t"] - stopped, 1),
                "seconds": r["seconds"],
                "body": str(r["body"])[:BODY_CHARS],
            }
            for r in failed
        ],
        "last_failure_s": round(failed[-1]["t"] - stopped, 1) if failed else None,
        "longest_outage_s": None if longest is None else round(longest, 1),
        "settled": len(settled),
        "settled_ok": all(r["status"] == 200 for r in settled),
    }
