"""Policies, sessions, chunk playback and codecs. Knows nothing of pytest or envs."""
