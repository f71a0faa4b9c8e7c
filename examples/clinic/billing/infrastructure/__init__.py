"""Adapters of the ports of billing."""
