"""This repository's own pytest defaults; the policybench plugin loads via its entry point."""
