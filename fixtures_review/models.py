"""Captures, review decisions, fixture and scenario versions (DESIGN §7)."""
