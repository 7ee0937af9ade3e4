"""What the pages where a person works on a run share (scoring rollouts, `policybench score`;
answering attended rollouts, the operator desk): a small loopback HTTP server (`server`) and one
page shell (`templates/shell.html.j2`)."""
