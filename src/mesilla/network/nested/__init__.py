"""Networking for nested containers, the host side (seed 002): the agent's subports of its
trunk (`agent`), their plumbing into pods (`plumbing`) and the `mesilla-nested` CNI plugin."""
