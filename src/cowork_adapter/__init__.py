"""cowork-adapter: run an AI agent on Cowork Bench with custody of money, containers and evidence."""

__version__ = "0.1.0"
