"""Booking: an appointment is held while its payment is awaited, and released if none comes."""
