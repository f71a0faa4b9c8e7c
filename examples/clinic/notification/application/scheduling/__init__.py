"""The scheduled jobs of notification: each only sends a command."""
