"""The arithmetic: cache simulation, memory terms, decode speed, serving, the solver. Pure:
no I/O, no CLI words."""
