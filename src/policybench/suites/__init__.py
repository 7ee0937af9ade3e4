"""Suite adapters: each module declares the Evals of one simulator. The core imports none."""
