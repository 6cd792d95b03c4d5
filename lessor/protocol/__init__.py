"""Wire formats shared by the server and the CLI, which imports nothing else of the server."""
