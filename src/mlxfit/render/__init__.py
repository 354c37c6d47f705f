"""Presentation only: each verb's result as Rich text and as JSON."""

# The version of every verb's --json object (fit, matrix, pick, cluster, measure, calibrate).
SCHEMA_VERSION = 1
