"""Adapters of the ports of notification."""
