"""Offline simulated calls: recorded speech, real-time audio IO and scripted models."""
