"""How a report words a context length and a duration: the way people say them ("32K in
context", "17.7 min"), beside the exact figure where that is the one to act on."""

from __future__ import annotations


def tokens_short(n: int) -> str:
    """32768 -> "32K", 1024 -> "1K"; a count that is not a whole number of K as it is."""
    return f"{n // 1024:,}K" if n >= 1024 and n % 1024 == 0 else f"{n:,}"


def duration(seconds: float) -> str:
    """Seconds as the report prints them, with minutes or hours beside a long wait:
    "12.3 s", "1,061.6 s (17.7 min)", "9,000.0 s (2.5 h)"."""
    s = f"{seconds:,.1f} s"
    if seconds >= 7200:
        return f"{s} ({seconds / 3600:,.1f} h)"
    if seconds >= 120:
        return f"{s} ({seconds / 60:,.1f} min)"
    return s
