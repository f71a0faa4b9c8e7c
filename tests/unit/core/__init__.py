"""Unit tests of the kernel and the scheduling core."""
