"""Records of what happened: Episodes and their traces."""
