"""A tiny own program for the golden render (never run)."""

print("hello from my own program")
