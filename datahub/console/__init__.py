"""The command-line runtime shared by every package that owns ``datahub`` subcommands."""
