"""The contract suite every Store implementation must pass."""
