"""`mlxfit calibrate`: refit the constants to saved measurements."""
