"""Pages where a person works on a run: scoring rollouts from their recordings (`policybench
score`), on a small loopback HTTP server (`server`) with one page shell."""
