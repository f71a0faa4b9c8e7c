"""Commands of notification and their handlers."""
