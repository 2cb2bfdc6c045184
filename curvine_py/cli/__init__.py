"""Command-line entry points: one console script, one subcommand per role or tool."""
