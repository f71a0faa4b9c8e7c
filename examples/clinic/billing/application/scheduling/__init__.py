"""The scheduled jobs of billing: each only sends a command."""
