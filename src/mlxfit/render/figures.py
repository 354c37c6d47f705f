"""How a report words a context length and a duration: the way people say them ("32K in
context", "17.7 min"), beside the exact figure where that is the one to act on."""

from __future__ import annotations


def tokens_short(n: int) -> str:
    """32768 -> "32K", 1024 -> "1K"; a count that is not a whole number of K as it is."""
    return f"{n // 1024:,}K" if n >= 1024 and n % 1024 == 0 else f"{n:,}"


def duration(seconds: float, band: tuple[float, float] | None = None) -> str:
    """Seconds as the report prints them, with the band and, beside a long wait, minutes or
    hours: "12.3 s", "1,061.6 s (17.7 min)", "149.9 s (134.1-212.1 s; 2.5 min)"."""
    extra = [f"{band[0]:,.1f}-{band[1]:,.1f} s"] if band else []
    if seconds >= 7200:
        extra.append(f"{seconds / 3600:,.1f} h")
    elif seconds >= 120:
        extra.append(f"{seconds / 60:,.1f} min")
    return f"{seconds:,.1f} s" + (f" ({'; '.join(extra)})" if extra else "")
