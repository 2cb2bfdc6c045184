"""Data-plane transports over the sans-IO codec in core/frames.py."""
