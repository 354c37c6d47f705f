"""The Typer command line: one module per verb (parse, call the twin, render)."""
