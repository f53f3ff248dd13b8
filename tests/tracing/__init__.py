"""Tests of the OpenTelemetry tracing."""
