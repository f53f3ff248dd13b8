"""Tests of the agent loop, grouped by behaviour."""
