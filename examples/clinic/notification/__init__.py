"""Reminders of appointments: sent once when due, by a job every 15 minutes."""
