"""Builders and helpers the test tiers share (no test module imports another)."""
