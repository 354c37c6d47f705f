"""Presentation only: each verb's result as Rich text and as JSON."""
